"""The figure of the extension table (:mod:`lengthx.report.tables.tau_vs_segmented`): each row's perplexity minus
OOTB's on the same pieces, against the evaluation length L/L_t, one panel per model family, drawn by
``lengthx figures``. A τ rule has one colour in every panel (solid: applied to OOTB); chunk-0.25 trained at 4L_t is
dashed (black alone, in its rule's colour with the best rule on OOTB); rows with equal values (LongRoPE is the
log rule) share one line. The rows and values are the table's (:func:`figure_series`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from lengthx.report.figures.paper_b import _factor  # noqa: E402
from lengthx.report.tables.render import latest_ok, model_info  # noqa: E402
from lengthx.report.tables.tau_vs_segmented import (  # noqa: E402
    BEST,
    CHUNK,
    LABELS,
    METHODS,
    MODELS,
    PPL,
    SETTINGS,
    TAU_RULES,
    best_rules,
    with_best_rule,
)

if TYPE_CHECKING:
    from collections.abc import Callable

matplotlib.use("Agg")

NAME = "ext_tau_vs_segmented"
RULE_COLORS = {rule: f"C{k}" for k, rule in enumerate(r for r in TAU_RULES if r != "longrope")}
RULE_COLORS["longrope"] = RULE_COLORS["log"]  # LongRoPE's factor squared is the log rule: the same τ


def figure_series(df: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(model, table method) → perplexity per setting: the rows of ``ext_tau_vs_segmented`` (the newest ``ok``
    rows, and chunk-0.25 with the best rule on OOTB), for the models with at least one τ rule on OOTB."""
    ok = latest_ok(df)
    if ok.empty:
        return {}
    ok = ok[(ok["task"] == PPL) & (ok["metric"] == "ppl")]
    ok, _ = with_best_rule(ok)
    rows = ok[ok["method"].isin(METHODS) & ok["model"].isin(MODELS) & ok["setting"].isin(SETTINGS)]
    ruled = set(rows[rows["method"].str.startswith("ootb+")]["model"])
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in rows[rows["model"].isin(ruled)].itertuples():
        out.setdefault((str(r.model), str(r.method)), {})[str(r.setting)] = float(r.value)
    return out


def _style(method: str, best: str | None) -> tuple[str, str]:
    """(colour, line style) of a row: a rule's colour, solid on OOTB, dashed on chunk-0.25."""
    if method == CHUNK:
        return "black", "--"
    if method == BEST:
        return RULE_COLORS.get(best or "", "black"), "--"
    return RULE_COLORS[method.removeprefix("ootb+")], "-"


def tau_vs_segmented_figure(df: pd.DataFrame, out: Path,
                            save: Callable[[plt.Figure, Path, str], list[Path]]) -> list[Path]:
    """Each row of the extension table minus OOTB against L/L_t, a panel per model of :data:`MODELS`."""
    series = figure_series(df)
    models = [m for m in MODELS if (m, "ootb") in series]
    if not models:
        return []
    best = {m: rules[0] for m, (rules, _) in best_rules(latest_ok(df)).items()}
    info = model_info()
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.4), squeeze=False)
    legend: dict[str, Line2D] = {}
    for ax, model in zip(axes[0], models, strict=True):
        base = series[(model, "ootb")]
        drawn: list[tuple[dict[str, float], list[str]]] = []
        for method in METHODS[1:]:
            values = series.get((model, method))
            if not values:
                continue
            twin = next((d for d in drawn if d[0] == values), None)
            if twin is not None:  # an equal row (LongRoPE = log) shares its line
                twin[1].append(method)
            else:
                drawn.append((values, [method]))
        ax.axhline(0, color="grey", lw=0.8)
        for values, methods in drawn:
            color, ls = _style(methods[0], best.get(model))
            settings = [s for s in SETTINGS if s in values and s in base]
            (line,) = ax.plot([_factor(s) for s in settings], [values[s] - base[s] for s in settings], ls=ls,
                              color=color, marker="o", ms=3, lw=1.4)
            if methods[0] != BEST:
                legend.setdefault(" = ".join(LABELS[m].removeprefix("OOTB + ").removesuffix(" (= log)")
                                             for m in methods), line)
        ax.set_xticks([_factor(s) for s in SETTINGS], [f"${s}$" for s in SETTINGS])
        ax.set_xlabel("evaluation length")
        ax.set_ylabel("perplexity − OOTB's (same pieces)")
        meta = info.get(model, {})
        rule = LABELS.get(f"ootb+{best.get(model)}", "–").removeprefix("OOTB + ")
        ax.set_title(f"{meta.get('display', model)} ({meta.get('pe', '')}); best rule on OOTB: {rule}", fontsize=8)
    legend["chunk-0.25 + the best rule on OOTB (dashed, the rule's colour)"] = Line2D([], [], color="grey", ls="--")
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=4, fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, -0.01))
    fig.suptitle("Temperature rules (solid, on OOTB) vs segmented training (dashed): perplexity minus OOTB's; "
                 "below 0 is better", fontsize=9)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return save(fig, out, NAME)
