"""Whether a results directory's file locks reach every machine that writes into it (docs/results.md, "Many
workers, one store").

The store's guarantees between processes rest on ``flock`` (the store's lock, one lock per cell). On one machine
the kernel keeps them. On a shared filesystem they hold across machines only where the filesystem makes them
cluster-wide: NFS forwards ``flock`` to the server as a whole-file lock (NFSv4, or v3 with its lock daemon), and
Lustre does with the ``flock`` mount option. Some mounts keep locks on the client instead, silently: NFS with
``nolock`` or ``local_lock=flock|all``, Lustre with ``localflock``. There two machines' jobs would both take
"the" lock, compute the same cell, and one rewrite of ``results.csv`` could drop the other's rows. Those mounts
are read from ``/proc/self/mountinfo`` and refused for jobs of a SLURM cluster (which run on several machines);
on one machine they are named in a warning. Lustre without ``flock`` refuses ``flock`` outright (ENOSYS), which
the store reports when it first takes its lock.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


def _unescape(field: str) -> str:
    """A mountinfo path field with its octal escapes (``\\040`` for a space) decoded, as bytes: the rest of the
    field (UTF-8, e.g. ``däta``) stays as it is."""
    if "\\" not in field:
        return field
    raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), field.encode("utf-8"))
    return raw.decode("utf-8", errors="surrogateescape")


def mount_of(path: Path, mountinfo: str) -> tuple[str, str, set[str]] | None:
    """(mount point, filesystem type, mount and superblock options) of the mount holding ``path``, from the text
    of a ``/proc/<pid>/mountinfo``; None when no line covers it."""
    target, best = str(path), None
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 6 or len(rest) < 3:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, rest[0], set(fields[5].split(",")) | set(rest[2].split(",")))
    return best


def local_lock_option(fstype: str, options: set[str]) -> str | None:
    """The mount option that keeps ``flock`` on the client of a shared filesystem, or None."""
    if fstype.startswith("nfs"):
        return next((o for o in ("nolock", "local_lock=flock", "local_lock=all") if o in options), None)
    if fstype == "lustre" and "localflock" in options:
        return "localflock"
    return None


def node_local_locks(directory: Path, mountinfo: str | None = None) -> str | None:
    """Why the file locks of ``directory`` would not reach other machines (its mount, type and option), or None
    (a local filesystem, or a shared one whose locks are cluster-wide, or no mount table to read)."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    found = mount_of(Path(os.path.realpath(directory)), mountinfo)  # links resolved as far as they exist
    if found is None:
        return None
    point, fstype, options = found
    option = local_lock_option(fstype, options)
    return None if option is None else f"{point} is {fstype} mounted with {option}"


def on_a_cluster() -> bool:
    """Whether this process is a job of a SLURM cluster (its siblings may run on other machines)."""
    return bool(os.environ.get("SLURM_JOB_ID")) or os.environ.get("SUBMITIT_EXECUTOR") == "slurm"
