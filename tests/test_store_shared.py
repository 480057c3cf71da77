"""The results store on a filesystem several machines share (docs/results.md, "Many workers, one store"): mounts
that keep file locks on one machine are refused in a SLURM job, and files replaced by rename are written under
names no other machine's process can share."""

from __future__ import annotations

import os
import socket

import pytest

from lengthx.core.store import ResultsStore, StoreError
from lengthx.core.store import mounts as store_mounts
from lengthx.core.store.files import temporary_path
from lengthx.core.store.mounts import mount_of, node_local_locks

# /proc/self/mountinfo lines: mount point (5th field), its options, " - ", type, source, superblock options
MOUNTS = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:40 / /home rw,relatime shared:20 - nfs4 srv:/home rw,vers=4.2,hard,proto=tcp,local_lock=none
41 22 0:41 / /scratch/old rw,relatime shared:21 - nfs srv:/old rw,vers=3,nolock,proto=tcp,local_lock=all
42 22 0:42 / /lustre rw,relatime shared:22 - lustre 10.0.0.1@o2ib:/fs rw,flock,lazystatfs
43 22 0:43 / /lustre/node rw,relatime shared:23 - lustre 10.0.0.1@o2ib:/fs2 rw,localflock
44 22 0:44 / /mnt/my\\040disk rw,relatime shared:24 - nfs4 srv:/d rw,vers=4.1,local_lock=flock
"""


@pytest.mark.parametrize("path,problem", [
    ("/home/me/results/mini", None),                     # NFSv4: flock goes to the server
    ("/scratch/old/results", "nolock"),                  # NFSv3 without its lock daemon
    ("/lustre/project/results", None),                   # Lustre with -o flock: cluster-wide
    ("/lustre/node/results", "localflock"),              # ... with -o localflock: one node's
    ("/mnt/my disk/results", "local_lock=flock"),        # an escaped space in the mount point
    ("/tmp/results", None),                              # a local disk
])
def test_mounts_whose_locks_stay_on_one_machine_are_named(path, problem):
    reason = node_local_locks(path, MOUNTS)
    assert (reason is None) == (problem is None)
    if problem is not None:
        assert problem in reason


def test_the_longest_mount_point_holds_the_path():
    assert mount_of("/lustre/node/x", MOUNTS)[:2] == ("/lustre/node", "lustre")
    assert mount_of("/lustre/nodes/x", MOUNTS)[:2] == ("/lustre", "lustre")


def test_a_slurm_job_refuses_a_results_dir_whose_locks_are_local(tmp_path, monkeypatch, caplog):
    """On a mount with node-local locks a SLURM job stops before any work, naming the mount and the fix; a run
    on one machine goes on with a warning."""
    table = tmp_path / "mountinfo"
    table.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                     f"50 22 0:50 / {tmp_path} rw - nfs srv:/x rw,vers=3,local_lock=all\n")
    monkeypatch.setattr(store_mounts, "MOUNTINFO", table)
    store = ResultsStore(tmp_path / "res")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    store.check_writable()
    assert "local_lock=all" in caplog.text
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    with pytest.raises(StoreError, match="local_lock=all.*Fix: pass results_dir="):
        store.check_writable()


def test_a_replacing_write_is_named_by_machine_and_process(tmp_path):
    name = temporary_path(tmp_path / "digests.json").name
    assert str(os.getpid()) in name and socket.gethostname().split(".")[0][:20] in name
