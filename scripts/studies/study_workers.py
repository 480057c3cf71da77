"""A study's cells as several processes side by side (``--worker I/K``) and the ``make gpu-study-carry`` line that
sizes them on a lent GPU machine (scripts/gpu_runs/gpu_study.sh, docs/gpu.md)."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

GPU_PROCESSES = 16  # a lent machine's CPU cores: one process each (docs/gpu.md)


def carry_line(results: Path, left: dict[str, int]) -> str:
    """The ``make gpu-study-carry`` line for the snapshots with cells pending, with processes in proportion to
    their cells (about :data:`GPU_PROCESSES` in all; scripts/gpu_runs/gpu_study.sh)."""
    total = sum(left.values())
    workers = {name: max(1, round(GPU_PROCESSES * n / total)) for name, n in left.items() if n}
    return (f"make gpu-study-carry STUDY_DIR={os.path.relpath(results)} STORES=1 SNAPSHOTS=\"{' '.join(workers)}\" "
            "WORKERS=\"" + " ".join(f"{name}={k}" for name, k in workers.items() if k > 1) + "\"") if total else "nothing pending"


def worker_spec(text: str) -> tuple[int, int]:
    """``I/K`` with 0 <= I < K."""
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or int(m[1]) >= int(m[2]):
        raise argparse.ArgumentTypeError(f"{text!r} is not I/K with 0 <= I < K (e.g. 0/3)")
    return int(m[1]), int(m[2])
