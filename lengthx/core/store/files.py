"""Checked writes of a results directory (docs/design.md §7, docs/results.md): every append is written in full and
fsynced, or the file is cut back to where it was and :class:`StoreError` names it (a full disk never leaves half a
row); a file that replaces another (caches, a header that grows, tables) is written beside it and renamed; no write
follows a symbolic link. A damaged file or line is never deleted: it moves to a ``<file>.corrupt-<timestamp>`` side
file (:func:`side_file`), and a damaged JSON cache is recomputed (:func:`read_json`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lengthx.errors import UserError

log = logging.getLogger("lengthx")


class StoreError(UserError, RuntimeError):
    """A results file or directory that needs attention; the message names it (and the line) and the fix."""


def write_error(path: Path, err: OSError) -> StoreError:
    """The :class:`StoreError` for a failed write to ``path``: what failed, that nothing partial was kept, the fix."""
    if err.errno == errno.ELOOP:
        return link_error(path)
    if err.errno == errno.EFBIG:
        return StoreError(f"{path}: could not write it ({err.strerror or err}: a file size limit, ulimit -f); "
                          "nothing partial was kept. Raise the limit and rerun the same command")
    return StoreError(f"{path}: could not write it ({err.strerror or err}); nothing partial was kept. Free disk "
                      "space (or make the directory writable) and rerun the same command")


def link_error(path: Path) -> StoreError:
    """The :class:`StoreError` for a symbolic link where lengthx writes: where it leads, and the fix."""
    try:
        target = f" to {os.readlink(path)}"
    except OSError:
        target = ""
    return StoreError(f"{path} is a symbolic link{target}: lengthx never writes through a link (it could lead "
                      "out of the results directory). Fix: delete the link (the file is recreated), or copy the "
                      "file it points to in its place")


def refuse_link(path: Path) -> None:
    """Raise :class:`StoreError` when ``path`` is a symbolic link (a file lengthx writes or repairs)."""
    if os.path.islink(path):
        raise link_error(path)


def _write_fully(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (POSIX allows short writes); OSError when none progresses."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "No space left on device (a write made no progress)")
        view = view[written:]


def append_bytes(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` in full and fsync it, or leave ``path`` as it was and raise
    :class:`StoreError` (the caller holds the store's lock). A symbolic link at ``path`` is refused."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise write_error(path, err) from err
    try:
        start = os.fstat(fd).st_size
        try:
            _write_fully(fd, data)
            os.fsync(fd)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)  # no half row or record stays behind
            raise write_error(path, err) from err
    finally:
        os.close(fd)


def temporary_path(path: Path) -> Path:
    """Where a file replacing ``path`` is written before the rename: named by this machine and process, since
    machines sharing a filesystem (a cluster's jobs) can run processes of the same PID."""
    host = re.sub(r"[^A-Za-z0-9.-]+", "_", socket.gethostname())[:64]
    return path.with_name(f".{path.name}.tmp-{host}-{os.getpid()}")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data``: a temporary file beside it, written in full and fsynced, then renamed. A
    symbolic link at ``path`` is refused (it is never followed, nor silently replaced)."""
    path = Path(path)
    refuse_link(path)
    tmp = temporary_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            _write_fully(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, IsADirectoryError) or path.is_dir():
            raise StoreError(f"{path} is a directory, where lengthx writes a file; move it away (or pass another "
                             "output directory)") from err
        raise write_error(path, err) from err


def make_dirs(path: Path) -> None:
    """``mkdir -p`` that fails as a :class:`StoreError` naming the directory."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreError(f"cannot create {path} ({err.strerror or err}); make its parent writable or pass "
                         "results_dir= a writable directory") from err

# ---- side files -------------------------------------------------------------------------------------------
def side_file(path: Path) -> Path:
    """A new ``<name>.corrupt-<timestamp>`` path beside ``path``, for lines or files set aside."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, k = path.with_name(f"{path.name}.corrupt-{stamp}"), 1
    while candidate.exists():
        k += 1
        candidate = path.with_name(f"{path.name}.corrupt-{stamp}-{k}")
    return candidate


def save_aside(path: Path, data: bytes) -> Path:
    """Write ``data`` (lines taken out of ``path``) to a new side file beside it; returns the side file."""
    side = side_file(path)
    write_atomic(side, data)
    return side



def read_json(path: Path, required: tuple[str, ...] = (),
              check: Callable[[dict[str, Any]], str | None] | None = None) -> dict[str, Any] | None:
    """A JSON cache file as a dict, or None when it is absent or damaged.

    A damaged one (not UTF-8 JSON, not an object, without a ``required`` key, or one ``check`` finds a problem
    with) is moved to a side file with a warning naming both and the problem, so the caller recomputes it
    instead of failing on every rerun. A symbolic link is refused."""
    refuse_link(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(data.decode("utf-8"))
        missing = [k for k in required if k not in obj] if isinstance(obj, dict) else []
        why = "is not a JSON object" if not isinstance(obj, dict) else f"has no {missing[0]!r}" if missing else None
        if why is None and check is not None:
            why = check(obj)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        why = f"is not JSON ({err})"
    if why is None:
        return obj
    side = side_file(path)
    try:
        os.replace(path, side)
    except OSError as err:
        raise write_error(path, err) from err
    log.warning("%s %s; moved it to %s (it is recomputed)", path, why, side)
    return None


def write_json(path: Path, obj: Any) -> None:
    """Write a JSON cache file atomically (a reader sees the old file or the new one, never half of one)."""
    make_dirs(path.parent)
    write_atomic(path, json.dumps(obj, indent=1).encode())
