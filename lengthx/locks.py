"""Locks that name their owner (docs/design.md §5 and §9): an ``flock`` on a file that holds the owner's PID.

The operating system releases an ``flock`` when its owner dies, so a lock left by a killed process never
blocks anyone; the PID written in the file lets a process that finds the lock held say whose it is.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def try_owned_lock(path: Path) -> tuple[int | None, str]:
    """Try to take the lock ``path`` without waiting: ``(fd, previous owner)`` when taken (this process's PID
    is then written in the file; close ``fd`` to release it), ``(None, owner)`` when another process holds it
    (``owner``: the PID it wrote, ``?`` when none)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None, owner
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd, owner
