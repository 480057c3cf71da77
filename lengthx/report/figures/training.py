"""Paper B's training curves (§4.4: every method on the same token budget), drawn by ``lengthx figures`` from
each run's ``metrics.jsonl`` (:mod:`lengthx.segmented.metrics`): per model, the training loss against the tokens
processed, one line per run (OOTB, full, chunk-α, prefix-α, DA), the raw logged values thin and their running
mean over about a fiftieth of the run on top.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lengthx.segmented.metrics import find_runs, read_curve  # noqa: E402

matplotlib.use("Agg")


def _running_mean(values: np.ndarray, width: int) -> np.ndarray:
    """Mean of each value and the ``width − 1`` before it (fewer at the start)."""
    sums = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - width)
    return (sums[idx] - sums[lo]) / (idx - lo)


def training_curves(runs_dir: Path, out: Path, save: Callable[[plt.Figure, Path, str], list[Path]]) -> list[Path]:
    """``sb_training_curves``: one panel per model directory under ``runs_dir`` (``runs/<profile>``), the loss of
    each of its runs against tokens processed. Nothing is drawn when no run has a curve."""
    by_model: dict[str, list[tuple[str, list[dict]]]] = {}
    for run in find_runs(runs_dir):
        rows = [r for r in read_curve(run) if "loss" in r and "tokens" in r]
        if rows:
            by_model.setdefault(run.parent.name, []).append((run.name, rows))
    if not by_model:
        return []
    models = sorted(by_model)
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 3.4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        for i, (name, rows) in enumerate(by_model[model]):
            tokens = np.array([r["tokens"] for r in rows], dtype=float)
            loss = np.array([r["loss"] for r in rows], dtype=float)
            ax.plot(tokens, loss, color=f"C{i}", lw=0.6, alpha=0.35)
            ax.plot(tokens, _running_mean(loss, max(1, len(loss) // 50)), color=f"C{i}", lw=1.4,
                    label=f"{name} ({rows[-1]['step']} steps)")
        ax.set_xlabel("tokens processed")
        ax.set_ylabel("training loss (nats per token)")
        ax.set_title(model, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"Paper B training curves (runs of profile {Path(runs_dir).name})", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "sb_training_curves")
