"""One writer per training run directory (docs/design.md §5): ``lengthx train`` holds ``<run>/.train.lock`` while
it trains, so a second ``lengthx train`` into the same directory stops before it touches the run (its
checkpoints, ``metrics.jsonl``, the export), naming the first one's PID. The lock is released when its owner
exits, however it exits."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lengthx.errors import UsageError
from lengthx.locks import try_owned_lock

LOCK_FILE = ".train.lock"


@contextmanager
def run_directory_lock(out: Path) -> Iterator[None]:
    """Hold the run directory ``out`` for this process, or raise :class:`UsageError` naming the one that does."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    fd, owner = try_owned_lock(path)
    if fd is None:
        raise UsageError(f"{out} is being trained by process {owner} (it holds {path}); a second writer would "
                         "interleave its checkpoints and metrics.jsonl. Fix: wait for it to finish (rerunning then "
                         "resumes), or pass another train.output_dir")
    try:
        yield
    finally:
        os.close(fd)
