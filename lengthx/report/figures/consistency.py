"""Figures and the tables they draw from say the same thing: same rows, same values.

A temperature figure (paper A Figures 3, 4, 6-9; :func:`lengthx.report.figures.paper_a.temperature_series`)
draws the τ of Algorithm 1's, the log rule's and Propositions 1-2's cells; its table (Tables 8-11) prints the
same cells. The extension figure (:func:`lengthx.report.figures.tau_vs_segmented.figure_series`) draws the
perplexity rows of ``ext_tau_vs_segmented``. :func:`disagreements` reads the rendered Markdown tables of a
results directory (``lengthx tables``) and the rows the figures are drawn from, and names every cell where they
differ at the table's precision, every row one has and the other lacks. ``make test`` runs it on the committed
results (``tests/test_figures.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from lengthx.report.figures.paper_a import TEMPERATURE_TABLES, temperature_series
from lengthx.report.figures.tau_vs_segmented import figure_series
from lengthx.report.tables import TABLES
from lengthx.report.tables.render import markdown_label, model_info
from lengthx.report.tables.spec import METHOD_LABELS, TableSpec

_CELL = re.compile(r"^\*{0,2}(-?\d+(?:\.\d+)?)")


def table_cells(path: Path, spec: TableSpec) -> dict[tuple[str, str, str, str], str]:
    """(model group, row label, task, setting) → the printed value, from the first table of a rendered Markdown
    file (row labels as Markdown prints them; the bracketed interval and bold marks dropped; a model's own row is
    labelled by the model)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: dict[tuple[str, str, str, str], str] = {}
    start = next((k for k, line in enumerate(lines) if line.startswith("| Models")), None)
    if start is None:
        return out
    group = ""
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        label, *cells = [c.strip() for c in line.strip("|").split("|")]
        if label.startswith("**"):
            group = label = label.strip("*")
        for col, cell in zip(spec.columns, cells, strict=False):
            m = _CELL.match(cell)
            if m and not col.average_of:
                out[(group, label, col.task, col.setting)] = m.group(1)
    return out


def _row_label(spec: TableSpec, method: str) -> str:
    return markdown_label(dict(spec.labels).get(method) or METHOD_LABELS.get(method, f"w/ {method}"))


def _compare(what: str, drawn: dict[str, float], printed: dict[str, str], digits: int) -> list[str]:
    """The differences between a figure's values and a table row's, by setting."""
    out = []
    for setting in sorted(set(drawn) | set(printed)):
        if setting not in printed:
            out.append(f"{what} at {setting}: the figure draws {drawn[setting]:.{digits}f}, the table has no cell")
        elif setting not in drawn:
            out.append(f"{what} at {setting}: the table prints {printed[setting]}, the figure draws nothing")
        elif f"{drawn[setting]:.{digits}f}" != printed[setting]:
            out.append(f"{what} at {setting}: the figure draws {drawn[setting]:.{digits}f}, the table prints "
                       f"{printed[setting]}")
    return out


def disagreements(results_dir: Path, df: pd.DataFrame) -> list[str]:
    """Every cell where a figure drawn from ``df`` (the results' rows) and the rendered table under
    ``results_dir/tables`` disagree; empty when they agree."""
    out: list[str] = []
    info = model_info()
    tables = results_dir / "tables"
    pairs = df[df["metric"] == "tau"][["model", "task"]].drop_duplicates().itertuples(index=False)
    for model, task in pairs:
        table_id = TEMPERATURE_TABLES.get(task)
        if table_id is None:
            continue
        spec = TABLES[table_id]
        series = temperature_series(df, model, task)
        if not series:
            continue
        path = tables / f"{table_id}.md"
        if not path.is_file():
            out.append(f"{path}: missing, but the figure of {model} on {task} draws {sorted(series)}")
            continue
        cells = table_cells(path, spec)
        group = info.get(model, {}).get("display", model)
        for method, points in series.items():
            label = _row_label(spec, method)
            printed = {s: v for (g, lb, t, s), v in cells.items()
                       if lb == label and t == task and (g == group or method in spec.shared_rows)}
            drawn = {str(r.setting): float(r.value) for r in points.itertuples()}
            out += _compare(f"{table_id} / {group} / {label}", drawn, printed, spec.digits)
    ext = figure_series(df)
    if ext:
        spec = TABLES["ext_tau_vs_segmented"]
        path = tables / f"{spec.id}.md"
        cells = table_cells(path, spec) if path.is_file() else {}
        for (model, method), points in ext.items():
            group = info.get(model, {}).get("display", model)
            label = _row_label(spec, method)
            printed = {s: v for (g, lb, _, s), v in cells.items() if g == group and lb == label}
            out += _compare(f"{spec.id} / {group} / {label}", points, printed, spec.digits)
    return out
