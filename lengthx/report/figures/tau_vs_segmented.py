"""The figure of the extension table (:mod:`lengthx.report.tables.tau_vs_segmented`): each row's perplexity minus
OOTB's on the same pieces, against the evaluation length L/L_t, one panel per model family, drawn by
``lengthx figures``. A τ rule has one colour in every panel (solid: applied to OOTB); chunk-0.25 trained at 4L_t is
dashed (black alone, in its rule's colour with the best rule on OOTB); rows with equal values (LongRoPE is the
log rule) share one line. The rows and values are the table's (:func:`figure_series`); with the results store, each
line carries the band of the table's paired 95% interval to OOTB on the same pieces (:func:`figure_intervals`,
docs/results.md), and the legend sits below the panels in the axes' type size.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from lengthx.core.store import ResultsStore  # noqa: E402
from lengthx.report.figures.paper_b import _factor, run_name  # noqa: E402
from lengthx.report.tables.intervals import table_intervals  # noqa: E402
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


def figure_intervals(df: pd.DataFrame, store: ResultsStore) -> dict[tuple[str, str], dict[str, tuple[float, float]]]:
    """(model, table method) → setting → the 95% interval of its paired difference to OOTB on the same pieces, as
    the table's paired-difference block gives it (cells whose records are all in ``store``)."""
    ok = latest_ok(df)
    if ok.empty:
        return {}
    ok, _ = with_best_rule(ok[(ok["task"] == PPL) & (ok["metric"] == "ppl")])
    out: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    for (model, method, _task, setting, _metric), iv in table_intervals(store, ok, {PPL}, {"ppl"}, "ootb").items():
        if iv.delta_low is not None and iv.delta_high is not None:
            out.setdefault((str(model), str(method)), {})[str(setting)] = (iv.delta_low, iv.delta_high)
    return out


def _l_t(df: pd.DataFrame, model: str) -> int | None:
    """The training length the model's perplexity rows were run at (a paper model run by its mini: the mini's)."""
    rows = df[(df["model"] == model) & (df["task"] == PPL)]
    values = rows["L_tr"].dropna() if "L_tr" in rows.columns else []
    return int(values.iloc[0]) if len(values) else None


def _style(method: str, best: str | None) -> tuple[str, str]:
    """(colour, line style) of a row: a rule's colour, solid on OOTB, dashed on chunk-0.25."""
    if method == CHUNK:
        return "black", "--"
    if method == BEST:
        return RULE_COLORS.get(best or "", "black"), "--"
    return RULE_COLORS[method.removeprefix("ootb+")], "-"


def tau_vs_segmented_figure(df: pd.DataFrame, out: Path, save: Callable[[plt.Figure, Path, str], list[Path]],
                            store: ResultsStore | None = None) -> list[Path]:
    """Each row of the extension table minus OOTB against L/L_t, a panel per model of :data:`MODELS`; with
    ``store``, the band of each row's paired 95% interval to OOTB."""
    series = figure_series(df)
    bands = figure_intervals(df, store) if store is not None else {}
    models = [m for m in MODELS if (m, "ootb") in series]
    if not models:
        return []
    best = {m: rules[0] for m, (rules, _) in best_rules(latest_ok(df)).items()}
    info = model_info()
    fig, axes = plt.subplots(1, len(models), figsize=(4.8 * len(models), 3.8), squeeze=False)
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
            x = [_factor(s) for s in settings]
            (line,) = ax.plot(x, [values[s] - base[s] for s in settings], ls=ls, color=color, marker="o", ms=3, lw=1.4)
            band = bands.get((model, methods[0]), {})
            if band:  # a gap where a cell has no interval (records missing): never a band it does not have
                nan = (float("nan"), float("nan"))
                ax.fill_between(x, [band.get(s, nan)[0] for s in settings], [band.get(s, nan)[1] for s in settings],
                                color=color, alpha=0.14, lw=0)
            if methods[0] != BEST:
                legend.setdefault(" = ".join(LABELS[m].removeprefix("OOTB + ").removesuffix(" (= log)")
                                             for m in methods), line)
        ax.set_xticks([_factor(s) for s in SETTINGS], [f"${s}$" for s in SETTINGS])
        ax.set_xlabel("evaluation length")
        ax.set_ylabel("perplexity − OOTB's (same pieces)")
        meta = info.get(model, {})
        rule = LABELS.get(f"ootb+{best.get(model)}", "–").removeprefix("OOTB + ")
        name = run_name(model, _l_t(df, model))
        name = meta.get("display", model) if name == model else name  # a mini is named as the mini it is
        ax.set_title(f"{name}, {meta.get('pe', '')}\nbest rule on OOTB: {rule}", fontsize=10)
    legend["chunk-0.25 + the best rule on OOTB (dashed, the rule's colour)"] = Line2D([], [], color="grey", ls="--")
    if bands:
        legend["95% interval of the paired difference to OOTB (band)"] = Patch(color="grey", alpha=0.3, lw=0)
    fig.legend(list(legend.values()), list(legend), loc="upper center", ncol=3, fontsize=10, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    fig.suptitle("Temperature rules (solid, on OOTB) vs segmented training (dashed): perplexity minus OOTB's; "
                 "below 0 is better", fontsize=11)
    fig.tight_layout()
    return save(fig, out, NAME)
