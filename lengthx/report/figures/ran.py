"""The figure of whatever ran (docs/design.md §7): for every model and task in the results store, each score
against the length per method, with the 95% interval of each cell from its records (docs/results.md), whether or
not a paper figure has that layout. One figure per (model, task), ``ran_<model>_<task>``, one panel per metric.

The x-axis shows the settings as the task and its tables label them (a passkey setting is a count of filler
characters, ``20k``; an ``lm`` setting is a count of tokens) and, under each, the input length L_ex in tokens.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from lengthx.core.store import ResultsStore  # noqa: E402
from lengthx.report.figures.paper_b import run_name  # noqa: E402
from lengthx.report.tables.intervals import cell_scores, mean_ci  # noqa: E402
from lengthx.report.tables.render import latest_ok  # noqa: E402
from lengthx.report.tables.spec import METHOD_LABELS  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

matplotlib.use("Agg")

NOT_SCORES = ("tau",)
ROUNDING = 5e-5  # a row's value is its examples' mean rounded to 4 decimals (lengthx.core.runner)  # a method's temperature is not a score of the task (the temperature figures draw it)


AXIS = {"accuracy": "accuracy (%)", "exact_match": "exact match (%)", "edit_similarity": "edit similarity (%)",
        "perplexity": "perplexity (lower is better)", "nll": "NLL per token (nats)",
        "ppl": "perplexity (lower is better)", "ppl_tokens": "token-weighted perplexity (lower is better)"}
MOST_METHODS = 10  # more methods than this in one figure: drawn in groups (:func:`method_groups`)


def method_groups(methods: list[str]) -> list[tuple[str, list[str]]]:
    """The methods of one figure, split when there are more than :data:`MOST_METHODS`: each checkpoint with the τ
    rules applied to it (``ootb``, ``ootb+log``, …: paper B's checkpoints with paper A's rules), then the
    checkpoints alone, by the length they were trained at (``…@2L_t``; the ones trained at no length, such as
    ``pretrained`` and ``ootb``, in each as references). (group name, its methods); one unnamed group when few."""
    if len(methods) <= MOST_METHODS:
        return [("", methods)]
    groups: list[tuple[str, list[str]]] = []
    ruled = sorted({m.split("+", 1)[0] for m in methods if "+" in m})
    for base in ruled:
        groups.append((f"{base}+rules", [m for m in methods if m == base or m.startswith(base + "+")]))
    plain = [m for m in methods if "+" not in m]
    lengths = sorted({m.split("@", 1)[1] for m in plain if "@" in m})
    references = [m for m in plain if "@" not in m]
    if len(plain) <= MOST_METHODS or not lengths:
        return [*groups, ("checkpoints", plain)] if plain else groups
    return [*groups, *((f"at-{at}", [*references, *(m for m in plain if m.endswith("@" + at))]) for at in lengths)]


def scored_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The newest ``ok`` row of every scored cell: methods other than ``stats``, metrics other than τ."""
    ok = latest_ok(df)
    if ok.empty:
        return ok
    ok = ok[(ok["method"] != "stats") & ~ok["metric"].isin(NOT_SCORES)]
    return ok[pd.to_numeric(ok["value"], errors="coerce").notna()]


def _settings(rows: pd.DataFrame) -> list[tuple[str, float | None]]:
    """(setting, its L_ex in tokens or None) in order of length."""
    out = []
    for setting, group in rows.groupby("setting"):
        l_ex = pd.to_numeric(group["L_ex"], errors="coerce").dropna() if "L_ex" in group.columns else pd.Series()
        out.append((str(setting), float(l_ex.median()) if len(l_ex) else None))
    return sorted(out, key=lambda s: (s[1] is None, s[1] or 0.0, s[0]))


def cell_interval(store: ResultsStore, row: object) -> tuple[float, float] | None:
    """The 95% interval of a cell whose value is the mean of its per-example scores (all ``n`` records present);
    None for a cell without them, or whose value is no such mean (token-weighted perplexity)."""
    got = cell_scores(store, row, str(row.metric))  # type: ignore[attr-defined]
    n, value = getattr(row, "n", None), float(row.value)  # type: ignore[attr-defined]
    if not got or n is None or pd.isna(n) or len(got) != int(n):
        return None
    values = list(got.values())
    if abs(sum(values) / len(values) - value) > ROUNDING + 1e-9 * abs(value):  # the row holds the mean rounded
        return None
    return mean_ci(values)


def _label(method: str) -> str:
    """A method as the tables name it (τ = 1 for ``none``)."""
    return "τ = 1" if method == "none" else METHOD_LABELS.get(method, method)


def _file_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name)


def ran_figure(rows: pd.DataFrame, model: str, task: str, store: ResultsStore | None, out: Path,
               save: Callable[[plt.Figure, Path, str], list[Path]], group: str = "") -> list[Path]:
    """One model's scores on one task (``rows``: :func:`scored_rows` of it) against the length, per method
    (``group``: which of :func:`method_groups` the rows are, named in the title and the file)."""
    metrics = sorted(rows["metric"].unique())
    settings = _settings(rows)
    position = {s: i for i, (s, _) in enumerate(settings)}
    intervals = {(str(r.method), str(r.setting), str(r.metric)): cell_interval(store, r) for r in rows.itertuples()} \
        if store is not None else {}
    methods = sorted(rows["method"].unique(), key=lambda m: (m != "none", m))
    fig, axes = plt.subplots(1, len(metrics), figsize=(max(4.6, 0.9 * len(settings) + 3.0) * len(metrics), 3.8),
                             squeeze=False)
    width = 0.5 / max(1, len(methods))  # methods side by side within a setting, so intervals do not overlap
    for ax, metric in zip(axes[0], metrics, strict=True):
        for k, method in enumerate(methods):
            cells = rows[(rows["method"] == method) & (rows["metric"] == metric)]
            cells = cells.assign(pos=cells["setting"].astype(str).map(position)).sort_values("pos")
            x = [p + (k - (len(methods) - 1) / 2) * width for p in cells["pos"]]
            y = [float(v) for v in cells["value"]]
            err_lo, err_hi = [], []
            for r, value in zip(cells.itertuples(), y, strict=True):
                iv = intervals.get((method, str(r.setting), metric))
                err_lo.append(max(0.0, value - iv[0]) if iv else 0.0)  # 0, not -1e-15, at an end
                err_hi.append(max(0.0, iv[1] - value) if iv else 0.0)
            ls = ("-", "--", ":")[k // 10 % 3] if len(x) > 1 else "none"  # past ten colours, another line style
            ax.errorbar(x, y, yerr=[err_lo, err_hi], color=f"C{k % 10}", marker="osD"[k // 10 % 3], ms=4, lw=1.2,
                        capsize=3, ls=ls, label=_label(method))
        ax.set_xticks(range(len(settings)),
                      [f"{s}\n{l_ex:,.0f} tok" if l_ex is not None else s for s, l_ex in settings])
        ax.set_xlabel("setting, as the task's tables label it; below it, the input length L_ex in tokens")
        ax.set_ylabel(AXIS.get(metric, metric))
    l_tr = pd.to_numeric(rows["L_tr"], errors="coerce").dropna() if "L_tr" in rows.columns else pd.Series()
    name = run_name(model, int(l_tr.iloc[0]) if len(l_tr) else None)
    bars = "bars: 95% interval over the cell's examples; paired differences: the tables" if any(intervals.values()) \
        else "no intervals: no records"
    what = f"what ran, {group.replace('+rules', ' with the τ rules').replace('at-', 'checkpoints trained at ')}" \
        if group else "what ran"
    fig.suptitle(f"{name}, {task}: {what}, per method ({bars})", fontsize=11)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=10, frameon=False)
    fig.tight_layout()
    return save(fig, out, f"ran_{_file_part(model)}_{_file_part(task)}" + (f"__{_file_part(group)}" if group else ""))


def ran_figures(df: pd.DataFrame, store: ResultsStore | None, out: Path,
                save: Callable[[plt.Figure, Path, str], list[Path]]) -> list[Path]:
    """:func:`ran_figure` for every (model, task) the store holds scores of."""
    rows = scored_rows(df)
    written: list[Path] = []
    for (model, task), cells in rows.groupby(["model", "task"]) if not rows.empty else []:
        methods = sorted(cells["method"].unique(), key=lambda m: (m != "none", m))
        for name, chosen in method_groups([str(m) for m in methods]):
            written += ran_figure(cells[cells["method"].isin(chosen)], str(model), str(task), store, out, save, name)
    return written
