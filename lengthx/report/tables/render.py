"""Render table specs from the results CSV to booktabs LaTeX and Markdown (docs/design.md §7).

Models are row groups, methods are rows (the model's own row first), columns are (task, setting, metric);
missing cells stay empty and are listed. ``--compare-paper`` puts the published number beside ours,
matched by the model's ``paper_role`` (mini models) or display name, the row's method and the column's
position in the paper's CSV.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from lengthx.config import CONF_DIR
from lengthx.core.store import SHORT_OF_TARGET, UNALIGNED_MARK, ResultsStore
from lengthx.report.tables.entries import Entry, latex_text, plain
from lengthx.report.tables.intervals import CellInterval, table_intervals
from lengthx.report.tables.latest import CELL_KEY, latest_ok, warn_future_rows  # noqa: F401 - re-exported
from lengthx.report.tables.marks import mark_stale, notes_for, row_average, with_l_tr
from lengthx.report.tables.published import published_rows
from lengthx.report.tables.spec import METHOD_LABELS, PAPER_ROW_METHODS, Column, Row, TableSpec

Published = list[tuple[str, str, list[str]]]
log = logging.getLogger("lengthx")


def model_info() -> dict[str, dict[str, str]]:
    """Display name, paper role and PE of every configured model (not ``model=hf``'s entry: an own checkpoint
    is named by its rows, docs/design.md §4)."""
    return {name: dict(meta) for name, meta in _model_info().items()}


@lru_cache(maxsize=1)
def _model_info() -> dict[str, dict[str, str]]:
    """:func:`model_info`, read from the config files once per process (every table reads it)."""
    out = {}
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        raw = OmegaConf.load(path)
        if raw.get("own"):
            continue
        out[str(raw.name)] = {"display": str(raw.get("display") or raw.name),
                              "paper_role": str(raw.get("paper_role") or raw.get("display") or raw.name),
                              "stand_in": "yes" if raw.get("paper_role") else "",
                              "pe": str(raw.get("pe", "")),
                              "paper_b_role": str(raw.get("paper_b_role") or raw.get("display") or raw.name)}
    return out




def unaligned(row: pd.Series | tuple) -> bool:
    """Whether a row's τ is Algorithm 1's grid end short of S̄_tr(1) (its ``message``, lengthx.core.store)."""
    message = row.get("message") if isinstance(row, pd.Series) else getattr(row, "message", "")
    return str(message) == SHORT_OF_TARGET


UNALIGNED_NOTE = (f"{UNALIGNED_MARK} τ is the end of Algorithm 1's grid (the paper's: 1.0 → 0.5) and S̄_ex(τ) had not "
                  "reached S̄_tr(1) there: the search stopped short, it did not align.")


def read_paper_table(spec: TableSpec) -> Published:
    """Published rows of ``spec`` as (row group, row label, values aligned with the spec's columns)."""
    out: Published = [(m, me, list(v)) for m, me, v in spec.paper_values]
    if spec.paper_csv is None:
        return out
    rows = published_rows(spec.paper_csv)  # package data; missing: FileNotFoundError naming it
    if spec.paper_key == "pe":  # paper B Tables 3-5: tidy rows (pe, method, values…)
        return out + [(r[0], r[1].lower(), r[2:]) for r in rows[1:]]
    if spec.paper_key == "model_b":  # paper B Table 2: (model, value)
        return out + [(r[0], "ootb", r[1:]) for r in rows[1:]]
    group = ""
    for row in rows[spec.paper_header_rows:]:
        label, values = row[0], row[1:]
        if label in PAPER_ROW_METHODS or label.startswith("w/"):
            out.append((group, PAPER_ROW_METHODS.get(label, label), values))
        elif all(v in (label, "") for v in values):
            group = label  # a model header row with no numbers
        else:
            group = label
            out.append((group, "none", values))
    return out


def paper_values(published: Published, role: str, method: str, row: Row | None) -> list[str]:
    """The published values for one of our rows (model ``role``, ``method`` or an explicit ``row``)."""
    for group, key, values in published:
        if row is not None and group == row.paper_label and key == "none":  # a criteria row (Tables 1, 7)
            return values
        if row is None and group == role and key == method:
            return values
    if row is None and method == "log":  # the paper gives the log row once, after its last model
        return next((v for _, k, v in published if k == "log"), [])
    return []


@dataclass
class Rendered:
    latex: str
    markdown: str
    missing: list[str]


def _fmt(spec: TableSpec, v: float | None, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if spec.overflow is not None and v > spec.overflow:
        return ">1k" if spec.overflow == 1000 else f">{spec.overflow:g}"
    digits = 0 if spec.sig_digits_above is not None and abs(v) >= spec.sig_digits_above else spec.digits
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def _lookup(table: dict, spec: TableSpec, model: str, method: str, task: str, setting: str, metric: str) -> Any:
    """``table``'s entry for one cell: paper B first under the run trained for the setting (``method@setting``)."""
    if not spec.method_at_setting:
        return table.get((model, method, task, setting, metric))
    if spec.method_at_setting and (model, f"{method}@{setting}", task, setting, metric) in table:
        return table[(model, f"{method}@{setting}", task, setting, metric)]
    return table.get((model, method, task, setting, metric))


def _values(index: dict, spec: TableSpec, model: str, method: str, metric: str | None) -> list[float | None]:
    """The values of one row of ``spec`` (``metric``, else each column's own; an average column: the mean of its
    settings when all are present)."""
    if spec.method_at_setting:
        get = lambda key: _lookup(index, spec, *key)  # noqa: E731
    else:
        get = index.get  # one dictionary read per cell: a lab's table has ~10^5 rows
    out: list[float | None] = []
    for c in spec.columns:
        m = metric or c.metric
        if c.average_of:
            parts = [get((model, method, c.task, s, m)) for s in c.average_of]
            out.append(sum(parts) / len(parts) if all(p is not None for p in parts) else None)
        else:
            out.append(get((model, method, c.task, c.setting, m)))
    return out


def _interval(intervals: dict, spec: TableSpec, model: str, method: str, col: Column,
              metric: str) -> CellInterval | None:
    """The interval of the cell :func:`_value` reads (none for an average of several cells)."""
    return None if col.average_of else _lookup(intervals, spec, model, method, col.task, col.setting, metric)


def render(spec: TableSpec, df: pd.DataFrame, compare_paper: bool = False,
           store: ResultsStore | None = None, stale: set[str] | frozenset[str] = frozenset()) -> Rendered:
    """Render ``spec`` from results rows (both formats), listing missing cells.

    With ``store`` (the results' directory) a spec with ``intervals`` shows each cell's 95% interval from its
    records, and the Markdown gains a table of paired differences to ``spec.paired_with`` (τ = 1, or OOTB).
    A cell whose key is in ``stale`` (:mod:`lengthx.core.currency`) is marked :data:`STALE_MARK`."""
    ok = latest_ok(df)
    ok = ok[ok["task"].isin(spec.tasks)] if not ok.empty else ok  # a lab's store holds many other tasks' cells
    spec, ok, stale = with_l_tr(spec, ok, stale)  # the stand-in at its training length (marks.py)
    notes: list[str] = []
    if spec.derive is not None and not ok.empty:
        ok, notes = spec.derive(ok)
    intervals = table_intervals(store, ok, spec.tasks, {c.metric for c in spec.columns}, spec.paired_with) \
        if spec.intervals and store is not None else {}
    paired: list[tuple[str, list[Entry], bool]] = []
    info = model_info()
    keys = list(zip(*(ok[c].astype(str).tolist() if c == "setting" else ok[c].tolist() for c in CELL_KEY),
                    strict=True)) if not ok.empty else []  # plain tuples: a lab's store has ~10^5 cells
    index = dict(zip(keys, ok["value"].tolist() if not ok.empty else [], strict=True))
    grid_end = ((ok["metric"] == "tau") & (ok["message"].astype(str) == SHORT_OF_TARGET)).to_numpy() \
        if "message" in ok.columns and not ok.empty else []
    short = {keys[i]: True for i in np.flatnonzero(grid_end)}  # τ of Algorithm 1 at its grid's end, short of target
    counts = {key: int(n) for key, n in zip(keys, ok["n"].tolist() if "n" in ok.columns else [None] * len(ok),
                                            strict=True) if n is not None and n == n}  # n == n: not NaN
    usual = _usual_count(counts, spec)
    tasks = spec.tasks
    present = {m for (m, _, t, _, _) in index if t in tasks}
    models = [m for m in spec.models if m in present] if spec.models else sorted(present)
    filled = _filled_by_model(spec, index)
    shown = _shown_pairs(spec)
    models = [m for m in models if m in info or not filled.get(m, set()).isdisjoint(shown)]  # own models: where
    # they fill a column (their task, setting and metric): a model=hf run gets a row only in the tables whose task
    # and settings it ran (docs/design.md §4)
    metrics = {c.metric for c in spec.columns}
    short_models = {k[0] for k in short}  # most models have no τ at its grid's end, and no interval
    interval_models = {k[0] for k in intervals}
    unusual_models = {k[0] for k, n in counts.items() if n != usual}
    gap_plan = _gap_plan(spec)
    extra = sorted({me.split("@")[0] for (m, me, t, _, mt) in index
                    if t in tasks and mt in metrics} - set(spec.methods) - {"stats", "none"}) \
        if spec.extra_methods else []
    published = read_paper_table(spec) if compare_paper else []
    body: list[tuple[str, list[Entry], bool]] = []  # (label, cells, is_model_row)
    marked = False  # whether a cell carries UNALIGNED_MARK
    missing: list[str] = []
    compared: list[str] = []
    for model in models:
        meta = info.get(model, {})
        display = meta.get("display", model)
        role, beside = _paper_role(spec, model, meta, published)
        if beside:
            compared.append(f"{display} is set beside the published {role}")
        plan: list[tuple[str, str | None, Row | None]] = (
            [(r.method, r.metric, r) for r in spec.rows] if spec.rows
            else [(m, None, None) for m in spec.methods + tuple(extra)])
        first_is_model = not spec.rows and spec.methods[0] == "none"
        if not first_is_model:
            body.append((display, plain([""] * (len(spec.columns) + spec.avg)), True))
        group_rows: list[tuple[int, list[float | None]]] = []
        values_by_method: dict[str, list[float | None]] = {}
        for method, metric, row in plan:
            vals = _values(index, spec, model, method, metric)
            missing += _gaps(gap_plan, f"{model} / {markdown_label(row.label) if row else method}", vals)
            if spec.avg:
                vals.append(row_average(spec, vals))
            values_by_method[method] = vals
            if row is not None:
                label, is_model = row.label, False
            else:
                is_model = first_is_model and method == spec.methods[0]
                label = display if is_model else dict(spec.labels).get(method) or METHOD_LABELS.get(method, f"w/ {method}")
            group_rows.append((len(body), vals))
            cells = _cells(spec, vals, published, role, method, row, compare_paper)
            if model in short_models:  # most models have no τ at Algorithm 1's grid end
                for e, c in zip(cells, spec.columns, strict=False):
                    e.grid_end = e.shown and not c.average_of and _lookup(
                        short, spec, model, method, c.task, c.setting, metric or c.metric) is not None
                marked = marked or any(e.grid_end for e in cells)
            mark_stale(cells, spec, model, method, stale)
            if model in interval_models:
                found = [_interval(intervals, spec, model, method, c, metric or c.metric) for c in spec.columns]
                for e, iv in zip(cells, found, strict=False):
                    e.interval = (_fmt(spec, iv.low), _fmt(spec, iv.high)) if iv else None
                if any(iv is not None and iv.delta is not None for iv in found):
                    if not any(is_header and name == display for name, _, is_header in paired):
                        paired.append((display, plain([""] * (len(spec.columns) + spec.avg)), True))  # its group
                    paired.append((label if not is_model else display, plain(_deltas(spec, found) + [""] * spec.avg),
                                   False))
            if usual is not None and model in unusual_models:  # a cell of another count than the table's usual one
                for e, c in zip(cells, spec.columns, strict=False):
                    k = None if c.average_of else _lookup(counts, spec, model, method, c.task, c.setting,
                                                          metric or c.metric)
                    e.count = k if e.shown and k is not None and k != usual else None
            body.append((label, cells, is_model))
            if spec.improvement and method == spec.improvement[0] and spec.improvement[1] in values_by_method:
                body.append(("Improvement", _improvement(spec, vals, values_by_method[spec.improvement[1]],
                                                         published if compare_paper else None, role), False))
        _bold_best(spec, body, group_rows)
    headers = [c.title for c in spec.columns] + (["Avg."] if spec.avg else [])
    groups = _column_groups(spec)
    markdown = _markdown(spec, groups, headers, body)
    if intervals:
        n = sorted({iv.n for iv in intervals.values()})
        kinds = "; ".join(INTERVAL_TEXT[k] for k in sorted({iv.kind for iv in intervals.values()}, reverse=True))
        markdown += f"\nBrackets: 95% interval over the cell's examples (n = {', '.join(map(str, n))}; {kinds}).\n"
    if paired:
        base = "τ = 1" if spec.paired_with == "none" else markdown_label(
            dict(spec.labels).get(spec.paired_with) or METHOD_LABELS.get(spec.paired_with, spec.paired_with))
        title = f"Paired difference to {base} on the same examples (mean, 95% interval)"
        markdown += "\n" + _markdown(spec, groups, headers, paired).replace(spec.title, title, 1)
    if usual is not None:
        other = any(e.count is not None for _, cells, _ in body for e in cells)
        markdown += (f"\nExamples per cell: n = {usual}" + ("; a cell marked (n=…) has another count" if other else "")
                     + ".\n")
    derived = f"{spec.derive_title}: {'; '.join(notes)}." if notes else ""
    if derived:
        markdown += f"\n{derived}\n"
    if compare_paper:
        note = "; ".join(compared)
        markdown += (f"\nOur value, then the published one in parentheses (– where ours is missing)"
                     f"{'; ' + note if note else ''}.\n")
    data_notes = table_notes(spec, ok[ok["model"].isin(models)] if not ok.empty else ok)
    if marked:  # a cell of this table is τ at Algorithm 1's grid end (never a bold cell's ** read as the mark)
        data_notes.append(UNALIGNED_NOTE)
    data_notes = notes_for(spec, ok, intervals, models, info, body) + data_notes  # what the model does at L_tr first
    if data_notes:
        markdown += "\n" + "\n\n".join(data_notes) + "\n"
    return Rendered(_latex(spec, groups, headers, body, [n for n in (derived, *data_notes) if n]), markdown, missing)


def _filled_by_model(spec: TableSpec, index: dict) -> dict[str, set[tuple[str, str]]]:
    """The (task, setting) pairs each model has a value of, in a metric of ``spec`` (one pass over ``index``)."""
    metrics = {c.metric for c in spec.columns} | {r.metric for r in spec.rows or ()}
    have: dict[str, set[tuple[str, str]]] = {}
    for (m, _, t, s, mt) in index:
        if mt in metrics:
            have.setdefault(m, set()).add((t, s))
    return have


def _shown_pairs(spec: TableSpec) -> set[tuple[str, str]]:
    """The (task, setting) pairs of the cells the table's columns show (both parts of an average)."""
    return {(c.task, s) for c in spec.columns for s in (c.average_of or (c.setting,))}


def _usual_count(counts: dict[tuple[str, str, str, str, str], int], spec: TableSpec) -> int | None:
    """The most common number of examples of the table's cells (None when no row names its count)."""
    metrics = {c.metric for c in spec.columns} | {r.metric for r in spec.rows or () if r.metric}
    shown = _shown_pairs(spec)
    mine = [n for (_, _, task, setting, metric), n in counts.items() if (task, setting) in shown and metric in metrics]
    return max(sorted(set(mine)), key=mine.count) if mine else None


def table_notes(spec: TableSpec, rows: pd.DataFrame) -> list[str]:
    """Notes under a table about what its numbers rest on (docs/design.md §7): rows built from a stand-in for
    the paper's data (``data`` = ``generated``, ``stdlib-…``: each task's ``stand_in``), rows written before
    results named their data, and a task's scoring rule where it departs from upstream (``score_note``)."""
    from lengthx.tasks import TASKS

    notes: list[str] = []
    metrics = {c.metric for c in spec.columns}
    for task in dict.fromkeys(c.task for c in spec.columns):
        cls = TASKS.get(task)
        mine = rows[(rows["task"] == task) & rows["metric"].isin(metrics)] if not rows.empty else rows
        if cls is None or mine.empty:
            continue
        stand_in = cls.stand_in
        if "data" in mine.columns and stand_in:
            labels = mine["data"].fillna("").astype(str)
            for key, what in stand_in.items():
                used = sorted({v for v in labels if v == key or v.startswith(key + "-")})
                if used:
                    notes.append(f"Data: the {task} rows are built from {what} (data={', '.join(used)}), a "
                                 f"stand-in for {cls.paper_data}.")
            unknown = int((labels == "").sum())
            if unknown:
                notes.append(f"Data: {unknown} {task} row(s) do not name their data (written before results "
                             f"recorded it); a run without real data builds them from "
                             f"{' or '.join(stand_in.values())}.")
        if cls.score_note and metrics & set(cls.metrics):
            notes.append(cls.score_note)
    return notes


def _paper_role(spec: TableSpec, model: str, meta: dict[str, Any],
                published: Published) -> tuple[str, bool]:
    """(the published row this model's values are compared with, whether it is a stand-in set beside the
    ``paper_reference`` model because the table has no row for its own role)."""
    role = {"pe": meta.get("pe", ""), "model_b": meta.get("paper_b_role", model)}.get(
        spec.paper_key, meta.get("paper_role", model))
    if (published and meta.get("stand_in") and spec.paper_reference
            and role not in {g for g, _, _ in published}):
        return spec.paper_reference, True  # a mini stand-in beside the model it stands in for in this table
    return role, False


def _gap_plan(spec: TableSpec) -> list[tuple[str, list[tuple[int, str]]]]:
    """(task, [(position, title) of its columns that are not averages]) in the order of the columns."""
    plan: dict[str, list[tuple[int, str]]] = {}
    for i, c in enumerate(spec.columns):
        plan.setdefault(c.task, [])
        if not c.average_of:
            plan[c.task].append((i, c.title))
    return list(plan.items())


def _gaps(plan: list[tuple[str, list[tuple[int, str]]]], where: str, vals: list[float | None]) -> list[str]:
    """One line per task naming the columns of a row that have no value (averaged columns aside; ``plan``:
    :func:`_gap_plan`)."""
    out = []
    for task, columns in plan:
        gaps = [title for i, title in columns if vals[i] is None]
        if gaps:
            out.append(f"{where} / {task}: {', '.join(gaps)}")
    return out


def _column_groups(spec: TableSpec) -> list[tuple[str, int]]:
    """(group title, number of columns) of consecutive columns that share a group, for the header row."""
    groups: list[tuple[str, int]] = []
    for c in spec.columns:
        if groups and groups[-1][0] == c.group:
            groups[-1] = (c.group, groups[-1][1] + 1)
        else:
            groups.append((c.group, 1))
    return groups


def _improvement(spec: TableSpec, vals: list[float | None], base: list[float | None],
                 published: Published | None, role: str) -> list[Entry]:
    """The cells of an "Improvement" row: ``vals`` − ``base`` per column, beside the published row if given."""
    diff = [a - b if a is not None and b is not None else None for a, b in zip(vals, base, strict=True)]
    cells = [Entry(_fmt(spec, d, signed=True)) for d in diff]
    if published is not None:
        cells = _beside_published(spec, cells, paper_values(published, role, "improvement", None))
    return cells


def _beside_published(spec: TableSpec, cells: list[Entry], pub: list[str]) -> list[Entry]:
    """``cells`` with the published value beside ours, taken from the column ``spec.paper_column`` names."""
    for i, e in enumerate(cells):
        k = spec.paper_column(i)
        e.published = pub[k] if k < len(pub) and pub[k] else None
    return cells


INTERVAL_TEXT = {  # how the intervals of a table were drawn (lengthx.report.tables.intervals)
    "score": ("each example right or wrong: Wilson score interval, and Newcombe's hybrid score interval for a "
              "paired difference"),
    "bootstrap": "percentile bootstrap of the mean, 2000 resamples",
}


def _deltas(spec: TableSpec, found: list[CellInterval | None]) -> list[str]:
    """Cells of the paired-difference table: ``+Δ [lo, hi]`` where both this cell and τ = 1 have records."""
    return [f"{_fmt(spec, iv.delta, signed=True)} [{_fmt(spec, iv.delta_low, signed=True)}, "
            f"{_fmt(spec, iv.delta_high, signed=True)}]" if iv is not None and iv.delta is not None else ""
            for iv in found]


def _cells(spec: TableSpec, vals: list[float | None], published: Published, role: str, method: str,
           row: Row | None, compare_paper: bool) -> list[Entry]:
    cells = [Entry(_fmt(spec, v)) for v in vals]
    if compare_paper:
        cells = _beside_published(spec, cells, paper_values(published, role, method, row))
    return cells


def _bold_best(spec: TableSpec, body: list, group_rows: list[tuple[int, list[float | None]]]) -> None:
    """Mark the best value of each ``bold`` column within a model group (``**…**``, ``\\textbf`` in LaTeX)."""
    headers = [c.title for c in spec.columns] + (["Avg."] if spec.avg else [])
    for j, h in enumerate(headers):
        if h not in spec.bold:
            continue
        cand = [(vals[j], i) for i, vals in group_rows if vals[j] is not None]
        if len(cand) < 2:
            continue
        best = (min if spec.lower_is_better else max)(v for v, _ in cand)
        for v, i in cand:
            if v == best:
                body[i][1][j].bold = True


def _latex(spec: TableSpec, groups, headers, body, notes: list[str] | None = None) -> str:
    ncols = len(headers)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\begin{{tabular}}{{l{'c' * ncols}}}", r"\toprule"]
    grp = " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{g}}}" for g, n in groups)
    lines.append(rf"Models & {grp}" + (" & " if spec.avg else "") + r" \\")
    start, rules = 2, []
    for _, n in groups:
        rules.append(rf"\cmidrule(lr){{{start}-{start + n - 1}}}")
        start += n
    lines.append(" ".join(rules))
    lines.append(" & " + " & ".join(headers) + r" \\")
    lines.append(r"\midrule")
    for i, (label, cells, is_model) in enumerate(body):
        if is_model and i > 0:
            lines.append(r"\midrule")
        lines.append(" & ".join([label.replace("_", r"\_") if is_model else label, *(e.latex() for e in cells)])
                     + r" \\")
    caption = " ".join([latex_text(spec.title), *(latex_text(n.replace("_", r"\_")) for n in notes or [])])
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _markdown(spec: TableSpec, groups, headers, body) -> str:
    group_row = [g for g, n in groups for _ in range(n)] + (["Avg."] if spec.avg else [])
    head = ["Models"] + [f"{g.split(',')[0]} {h}" if g != h else h for g, h in zip(group_row, headers, strict=True)]
    lines = [f"**{spec.title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, cells, is_model in body:
        name = f"**{label}**" if is_model else label
        lines.append("| " + " | ".join([markdown_label(name), *(e.markdown() for e in cells)]) + " |")
    return "\n".join(lines) + "\n"


def markdown_label(label: str) -> str:
    r"""A row label for Markdown and the terminal: the LaTeX math of the .tex label (``w/ $P_{\max}$``) as
    plain text (``w/ P_{max}``)."""
    return label.replace("$", "").replace("\\", "")
