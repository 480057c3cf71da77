#!/usr/bin/env python
"""A one-node SLURM cluster on 127.0.0.1: munged, slurmctld and slurmd started from a generated ``slurm.conf`` in a
directory of their own, for lengthx's SLURM tests and a first try of ``hydra/launcher=slurm`` (docs/cluster.md).

    python scripts/slurm/local_cluster.py start DIR     # waits for the node to be idle; prints the SLURM_CONF line
    export SLURM_CONF=DIR/slurm.conf                    # always: without it the clients look the controller up in DNS
    python scripts/slurm/local_cluster.py stop DIR      # stops the three daemons by their PIDs

Needs Debian's ``slurm-wlm`` and ``munge`` and root (the daemons run as root, on loopback only: SlurmctldHost and
the node's address are 127.0.0.1, on ports picked free). State, spool, logs, the munge socket and the PIDs live in
DIR. The node has this machine's CPUs and memory; ``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none``
need no cgroups; ``JobCompType=jobcomp/filetxt`` keeps every finished job in ``DIR/jobs.txt``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel")
NODE = "lengthx-node"


def missing() -> list[str]:
    """The commands a local cluster needs that are not installed (``apt-get install slurm-wlm munge``)."""
    found = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    return found + (["root"] if os.geteuid() != 0 else [])


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memory_mb() -> int:
    """This machine's memory in MB, less a quarter for everything that is not a job."""
    kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
              if line.startswith("MemTotal:"))
    return kb * 3 // 4 // 1024


def write_conf(root: Path) -> Path:
    """``root/slurm.conf`` for one node on 127.0.0.1, every path inside ``root``."""
    for sub in ("state", "spool", "log", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    host = socket.gethostname().split(".")[0]
    conf = f"""# written by scripts/slurm/local_cluster.py: one node on 127.0.0.1
ClusterName=lengthx
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket,cred_expire=10
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={memory_mb() // (os.cpu_count() or 1)}
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobRequeue=1
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobs.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
InactiveLimit=0
KillWait=2
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={os.cpu_count()} RealMemory={memory_mb()} State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
    path = root / "slurm.conf"
    path.write_text(conf)
    return path


def env(root: Path) -> dict[str, str]:
    """This process's environment with ``SLURM_CONF`` naming the cluster's configuration."""
    return {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}


def start(root: Path, timeout: float = 120.0) -> dict[str, int]:
    """Start munged, slurmctld and slurmd for ``root`` and wait until the node is idle; returns their PIDs (kept
    in ``root/pids.json``). Raises ``RuntimeError`` with the last lines of the logs when the node does not come up."""
    root = Path(root).resolve()
    write_conf(root)
    e = env(root)
    log = root / "log"
    pids: dict[str, int] = {}
    procs = {
        "munged": [_which("munged"), "-F", "--force", f"--socket={root}/munge/munge.socket",
                   f"--pid-file={root}/munge/munged.pid", f"--log-file={log}/munged.log",
                   f"--seed-file={root}/munge/munged.seed"],
        "slurmctld": [_which("slurmctld"), "-D", "-i", "-f", str(root / "slurm.conf")],
        "slurmd": [_which("slurmd"), "-D", "-N", NODE, "-f", str(root / "slurm.conf")],
    }
    for name, argv in procs.items():
        out = (log / f"{name}.out").open("ab")
        pids[name] = subprocess.Popen(argv, env=e, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True).pid
        (root / "pids.json").write_text(json.dumps(pids))
        if name == "munged":
            _wait(lambda: (root / "munge" / "munge.socket").exists(), 20, "munged's socket", root)
    _wait(lambda: _node_state(e) in ("idle", "idle*"), timeout, "the node to be idle", root)
    return pids


def _node_state(e: dict[str, str]) -> str:
    p = subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%t"], env=e, capture_output=True, text=True, timeout=20)
    return p.stdout.strip()


def _wait(ok, timeout: float, what: str, root: Path) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            if ok():
                return
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(1)
    tails = "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                      for p in sorted((root / "log").glob("*")) if p.is_file())
    stop(root)
    raise RuntimeError(f"the local cluster in {root}: no {what} after {timeout:.0f} s\n{tails}")


def stop(root: Path) -> None:
    """Stop the daemons ``root/pids.json`` names (SIGTERM, then SIGKILL after 10 s), then any process still running
    under the cluster (a job step slurmd left behind)."""
    path = Path(root) / "pids.json"
    if not path.is_file():
        return
    pids = json.loads(path.read_text())
    for pid in reversed(list(pids.values())):
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    end = time.time() + 10
    for pid in pids.values():
        while time.time() < end and _alive(pid):
            time.sleep(0.2)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
    for pid in _jobs_of(root):  # what slurmd left behind (a job step's slurmstepd, srun, the job): nothing outlives it
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    path.unlink()


def _jobs_of(root: Path) -> list[int]:
    """The processes started under this cluster (their environment names its ``SLURM_CONF``), this one aside."""
    conf = f"SLURM_CONF={Path(root) / 'slurm.conf'}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if conf in environ.read_bytes().split(b"\0") and int(environ.parent.name) != os.getpid():
                found.append(int(environ.parent.name))
        except (OSError, ValueError):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a child of this process that exited is a zombie until reaped
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in ("start", "stop"):
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(args[1]).resolve()
    if args[0] == "stop":
        stop(root)
        return 0
    lacking = missing()
    if lacking:
        print(f"local_cluster: missing {', '.join(lacking)}. Fix: as root, apt-get install slurm-wlm munge",
              file=sys.stderr)
        return 2
    root.mkdir(parents=True, exist_ok=True)
    pids = start(root)
    print(f"local cluster up ({', '.join(f'{k} {v}' for k, v in pids.items())}); export SLURM_CONF={root}/slurm.conf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
