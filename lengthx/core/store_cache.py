"""``results.csv`` parsed once per file version (docs/results.md): a sweep asks whether each of its cells is
done, and the tables read the file for every table, so a results file of a lab's size (hundreds of thousands of
rows) would be parsed and checked again each time. A parsed frame is kept per path with the file's identity
(inode, size, modification time in nanoseconds); any write lengthx makes changes one of them (an append the
size, a rewrite by rename the inode), and then the file is read again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

_FRAMES: dict[Path, tuple[tuple[int, int, int], Any]] = {}


def file_version(path: Path) -> tuple[int, int, int] | None:
    """(inode, size, mtime in ns) of ``path``, or None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def cached_frame(path: Path, version: tuple[int, int, int] | None) -> Any | None:
    """A copy of the frame kept for ``path`` at ``version``, or None."""
    kept = _FRAMES.get(path)
    if version is None or kept is None or kept[0] != version:
        return None
    return kept[1].copy()


def keep_frame(path: Path, version: tuple[int, int, int] | None, frame: Any) -> None:
    """Keep ``frame`` (a copy) as what ``path`` holds at ``version``."""
    if version is not None:
        _FRAMES[path] = (version, frame.copy())
