"""A training run's curve (docs/design.md §5): ``metrics.jsonl`` in its run directory, one JSON line per logged
step with ``step``, ``loss`` (mean over the steps since the previous line), ``lr``, ``tokens`` (processed so
far), ``tokens_per_s`` (over the steps since the previous line) and ``seconds`` (training time so far).

Runs trained before ``metrics.jsonl`` wrote the same lines, without ``tokens_per_s``, to ``curve.jsonl``; both
read the same. Nothing here needs torch, so figures and the API read curves without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
LEGACY_CURVE_FILE = "curve.jsonl"


def metrics_path(run_dir: str | Path) -> Path:
    """A run's ``metrics.jsonl``, or the ``curve.jsonl`` of a run trained before it."""
    path = Path(run_dir) / METRICS_FILE
    legacy = Path(run_dir) / LEGACY_CURVE_FILE
    return legacy if legacy.is_file() and not path.is_file() else path


def read_curve(run_dir: str | Path) -> list[dict[str, Any]]:
    """The logged steps of a run, sorted by step (lines in the order written among equal steps); a line that is
    not a JSON object with a numeric ``step`` (a torn last line, left by a run killed while writing) is skipped."""
    path = metrics_path(run_dir)
    rows = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            step = row.get("step") if isinstance(row, dict) else None
            if isinstance(step, int | float) and not isinstance(step, bool):
                rows.append(row)
    return sorted(rows, key=lambda r: r["step"])


def find_runs(runs_dir: str | Path) -> list[Path]:
    """Every run directory below ``runs_dir`` that has a curve (``runs/<profile>/<model>/<run>/``), sorted."""
    root = Path(runs_dir)
    found = {p.parent for name in (METRICS_FILE, LEGACY_CURVE_FILE) for p in root.rglob(name)}
    return sorted(p for p in found if ".hydra" not in p.parts and "checkpoints" not in p.parts)
