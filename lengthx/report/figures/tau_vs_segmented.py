"""The figure of the extension table (:mod:`lengthx.report.tables.tau_vs_segmented`): perplexity against
evaluation length L/L_t, one curve per method (OOTB with and without each τ rule, solid; chunk-0.25 trained at
4L_t with and without them, dashed), one panel per model family, drawn by ``lengthx figures``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from lengthx.report.figures.paper_b import _factor  # noqa: E402
from lengthx.report.tables.render import model_info  # noqa: E402
from lengthx.report.tables.tau_vs_segmented import CHUNK, LABELS, MODELS, PPL, TAU_RULES  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

matplotlib.use("Agg")

NAME = "ext_tau_vs_segmented"
CURVES = ("ootb", *(f"ootb+{r}" for r in TAU_RULES), CHUNK, *(f"{CHUNK}+{r}" for r in TAU_RULES))


def _label(method: str) -> str:
    """The table's row label (its LaTeX math is matplotlib's mathtext); chunk-0.25 with a rule as OOTB's."""
    base, _, rule = method.partition("+")
    if base == "ootb":
        return LABELS.get(method, "OOTB")
    return LABELS[CHUNK] + (LABELS[f"ootb+{rule}"].removeprefix("OOTB") if rule else "")


def tau_vs_segmented_figure(df: pd.DataFrame, out: Path,
                            save: Callable[[plt.Figure, Path, str], list[Path]]) -> list[Path]:
    """Perplexity vs L/L_t per method, a panel per model of :data:`MODELS` with rows of at least one τ rule."""
    rows = df[(df["task"] == PPL) & (df["metric"] == "ppl") & df["method"].isin(CURVES)].copy()
    rows["factor"] = rows["setting"].map(_factor)
    rows = rows.dropna(subset=["factor"])
    models = [m for m in MODELS if rows[(rows["model"] == m) & rows["method"].str.contains("+", regex=False)].size]
    if not models:
        return []
    info = model_info()
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 3.6), squeeze=False)
    handles: dict[str, object] = {}
    for ax, model in zip(axes[0], models, strict=True):
        mine = rows[rows["model"] == model]
        for method in (m for m in CURVES if (mine["method"] == m).any()):  # a rule's colour on both models
            g = mine[mine["method"] == method].sort_values("factor")
            (line,) = ax.plot(g["factor"], g["value"], marker="o", ms=3, lw=1.2, color=f"C{CURVES.index(method) % 8}",
                              ls="-" if method.startswith("ootb") else "--", label=_label(method))
            handles.setdefault(method, line)
        ax.axvline(1, color="grey", lw=0.5, ls=":")
        ax.set_xlabel(r"evaluation length $L / L_t$")
        ax.set_ylabel("perplexity (mean per sequence)")
        meta = info.get(model, {})
        ax.set_title(f"{meta.get('display', model)} ({meta.get('pe', '')})", fontsize=10)
    order = [m for m in CURVES if m in handles]  # one legend for all panels: a rule has one colour everywhere
    fig.legend([handles[m] for m in order], [_label(m) for m in order], loc="lower center", fontsize=7,
               ncol=min(4, len(order)), frameon=False, bbox_to_anchor=(0.5, -0.02 - 0.045 * (len(order) // 4)))
    fig.suptitle("Temperature vs segmented training: perplexity against length", fontsize=10)
    fig.tight_layout()
    return save(fig, out, NAME)
