"""Which cells of a table a set of runs fills, and how many numbers the published table holds.

Used by the dry runs (``lengthx run -m experiment=… --dry-run``, ``lengthx plan``) to show that the
experiments of ``conf/experiment/`` cover every cell of paper A's tables.

A *cell* of a table is one number that a run produces: a (row, column) pair where the row is a
(model, method) — or an explicit statistics row (Tables 1, 7) — and the column one (task, setting,
metric). Derived numbers are not cells: "Avg." columns and "Improvement" rows are computed from cells.
"""

from __future__ import annotations

from collections.abc import Iterable

from lengthx.config import is_number
from lengthx.report.tables.published import published_rows
from lengthx.report.tables.spec import TableSpec

# (model, method, task, setting): the key of one run cell, as ``lengthx.core.cells.Cell.key`` splits it
RunCell = tuple[str, str, str, str]


def filled_cells(spec: TableSpec, runs: Iterable[RunCell]) -> set[tuple[str, str, str, int]]:
    """The (model, method, row label, column index) cells of ``spec`` that ``runs`` fill.

    A run fills a column when its task and setting are the column's (average columns are derived and are
    never filled). Rows: the spec's explicit ``rows`` (by method), else its ``methods``; a model outside
    ``spec.models`` fills nothing. Methods in ``spec.shared_rows`` fill one row for every model, as the
    paper prints them (paper A Tables 8-11: the log row). Columns are counted as the published table's
    (``spec.paper_column``): several of ours compared with one published number fill that one cell. With
    ``spec.method_at_setting`` a run trained for one length (``chunk-0.25@2L_t``) fills its method's row at
    that length's column.
    """
    out: set[tuple[str, str, str, int]] = set()
    by_column: dict[tuple[str, str], list[int]] = {}
    for j, col in enumerate(spec.columns):
        if not col.average_of:
            by_column.setdefault((col.task, col.setting), []).append(j)
    for model, method, task, setting in runs:
        if spec.models is not None and model not in spec.models:
            continue
        if spec.method_at_setting and method.endswith(f"@{setting}"):  # paper B: chunk-0.25@2L_t at 2L_t
            method = method.removesuffix(f"@{setting}")
        if spec.rows:
            labels = [r.label for r in spec.rows if r.method == method]
        else:
            labels = [method] if method in spec.methods else []
        for j in by_column.get((task, setting), []):
            for label in labels:
                owner = "*" if method in spec.shared_rows else model
                out.add((owner, method, label, spec.paper_column(j)))
    return out


def published_cell_count(spec: TableSpec) -> int | None:
    """Numbers in the published table of ``spec`` that are cells (not "Avg." columns, not "Improvement").

    Reads the paper's CSV from the package data (paper A's grid layout: ``spec.paper_header_rows`` header rows,
    then model header rows with no numbers, model rows and "w/ …" rows; paper B's tidy layout: the numbers of
    its value columns, the columns whose every entry is a number); a table reported in the text counts
    its ``paper_values``. ``None`` only for a table the paper does not publish; a published table missing
    from the install is a :class:`FileNotFoundError` (:func:`lengthx.report.tables.published.published_rows`).
    """
    if spec.paper_csv is None:
        return sum(len(values) for _, _, values in spec.paper_values) if spec.paper_values else None
    rows = published_rows(spec.paper_csv)
    if spec.paper_key != "model":  # paper B's tidy CSVs: one header row, key columns, then value columns
        values = [j for j in range(len(rows[0])) if all(is_number(r[j]) for r in rows[1:] if r[j].strip())]
        return sum(1 for r in rows[1:] for j in values if r[j].strip())
    headers = rows[spec.paper_header_rows - 1]
    derived = {j for j, h in enumerate(headers) if h.strip() == "Avg."}
    count = 0
    for row in rows[spec.paper_header_rows:]:
        label = row[0]
        if label == "Improvement":
            continue
        count += sum(1 for j, v in enumerate(row[1:], start=1) if v.strip() and v != label and j not in derived)
    return count
