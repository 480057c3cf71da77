"""A one-screen summary of a results directory: what ran, setting × method, with τ and n (the demo's last table).

The full paper tables (:mod:`lengthx.report.tables.render`) place each number where the paper does; this view
lists only the cells present, one row per model, task and setting, one column per method, each entry the
task's first metric over the cell's examples (the largest finished run: :func:`lengthx.report.tables.render.
latest_ok`), its number of examples n and, where a temperature was applied, its τ. An entry computed by
another version of the code than the current checkout is marked † and counted under the table: its number may
not be what this code computes (``lengthx run`` recomputes a cell whose task or model changed).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lengthx.core.frames import finite_number, rows
from lengthx.core.store import UNALIGNED_MARK
from lengthx.report.tables.marks import STALE_MARK, STALE_NOTE
from lengthx.report.tables.render import UNALIGNED_NOTE, latest_ok, unaligned

OTHER_CODE = "†"


def _entry(row: tuple, current: str | None, stale: set[str] | frozenset[str] = frozenset(),
           other: bool | None = None) -> str:
    """One cell of the summary from a row of ``itertuples`` (value, τ with its grid-end mark, n, the marks)."""
    tau, value = getattr(row, "tau", None), row.value
    shown = short_number(value) if isinstance(value, float) else str(value)
    mark_tau = UNALIGNED_MARK if unaligned(row) else ""
    tau_text = f"τ={float(tau):.2f}{mark_tau}, " if finite_number(tau) is not None and float(tau) != 1.0 else ""
    n = getattr(row, "n", None)
    n_text = f"n={int(n)}" if finite_number(n) is not None else "n=?"
    if other is None:
        other = other_code(getattr(row, "git_commit", None), current)
    mark = OTHER_CODE if other else ""
    mark += STALE_MARK if getattr(row, "cell", None) in stale else ""
    return f"{shown} ({tau_text}{n_text}){mark}"


def short_number(v: float) -> str:
    """A value as the summary prints it: three significant digits, whole from 100 (73.3, 0.283, 100, 1532)."""
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _commit(value: object) -> str:
    return str(value).removesuffix("+dirty") if pd.notna(value) and str(value) else ""


def other_code(commit: object, current: str | None) -> bool:
    """Whether a row's ``git_commit`` names another version of the code than ``current`` (the checkout's)."""
    return bool(current) and _commit(current) != "unknown" and _commit(commit) != _commit(current)


def summary_markdown(df: pd.DataFrame, current: str | None = None,
                     stale: set[str] | frozenset[str] = frozenset()) -> str:
    """Markdown table of each cell's first metric (its largest finished run), settings in the order they ran;
    ``current``: the checkout's commit, to mark entries computed by another version of the code; ``stale``: the
    cells :mod:`lengthx.core.currency` found stale, marked :data:`STALE_MARK`."""
    fields = ("model", "task", "setting", "method", "value", "tau", "n", "git_commit", "cell", "message")
    ok = latest_ok(df)
    ok = ok.assign(**{c: None for c in fields if c not in ok.columns})[[*fields, "metric"]]  # the columns shown: a lab's
    ok = ok[(ok["method"] != "stats").to_numpy()]  # store has ~10^5 cells; lengthx stats rows are no method
    failed = failed_cells(df)
    listed = "\n".join([f"Failed cells ({len(failed)}; their last run ended in error, no value shown):",
                         *(f"- {cell}: {message}" for cell, message in failed)]) if failed else ""
    if ok.empty:
        return "(no finished cell)" + (f"\n\n{listed}" if listed else "")
    first_metric = df[["task", "metric"]][(df["status"] == "ok").to_numpy()].groupby(
        "task", sort=False)["metric"].first()
    ok = ok[(ok["metric"] == ok["task"].map(first_metric)).to_numpy()]
    order = {cell: k for k, cell in enumerate(dict.fromkeys(df["cell"].unique().tolist()))}
    ok = ok.iloc[np.argsort(ok["cell"].map(order).to_numpy(), kind="stable")]
    ok["tau"] = pd.to_numeric(ok["tau"], errors="coerce")
    methods = list(dict.fromkeys(ok["method"].tolist()))
    lines = ["| model | task | setting | metric | " + " | ".join(methods) + " |",
             "|---|---|---|---|" + "---|" * len(methods)]
    table: dict[tuple[str, str, str], dict[str, str]] = {}  # (model, task, setting) in the order they ran
    short = ""
    other = {c: other_code(c, current) for c in set(ok["git_commit"].tolist())}
    for r in rows(ok, fields):  # plain Python values: a lab's store has ~10^5 cells
        table.setdefault((r.model, r.task, r.setting), {})[r.method] = _entry(r, current, stale, other[r.git_commit])
        short = short or (UNALIGNED_NOTE if unaligned(r) else "")
    for (model, task, setting), by_method in table.items():
        lines.append(f"| {model} | {task} | {setting} | {first_metric[task]} | "
                     + " | ".join(by_method.get(m, "–") for m in methods) + " |")
    note = _other_code_note(ok, current)
    old = STALE_NOTE if stale & set(ok["cell"].tolist()) else ""
    if listed:
        old = listed + (f"\n\n{old}" if old else "")
    return ("\n".join(lines) + (f"\n\n{short}" if short else "") + (f"\n\n{old}" if old else "")
            + (f"\n\n{OTHER_CODE} {note}" if note else ""))


def failed_cells(df: pd.DataFrame) -> list[tuple[str, str]]:
    """(cell, message) of each cell whose newest row is an ``error`` or ``oom`` status row."""
    if df.empty or "status" not in df.columns:
        return []
    last = df[[c for c in ("cell", "status", "message") if c in df.columns]].drop_duplicates("cell", keep="last")
    bad = last[last["status"].isin(["error", "oom"])]
    return [(str(r.cell), f"{r.status}: {str(r.message)[:200]}") for r in bad.itertuples()]


def code_versions_note(df: pd.DataFrame, current: str | None) -> str | None:
    """One sentence on the finished rows computed by other versions of the code than ``current``, or None."""
    if df.empty or "git_commit" not in df.columns:
        return None
    return _other_code_note(latest_ok(df), current)


def _other_code_note(ok: pd.DataFrame, current: str | None) -> str | None:
    """:func:`code_versions_note` of rows that are already one per cell (:func:`latest_ok`'s)."""
    if ok.empty or "git_commit" not in ok.columns:
        return None
    flags = {c: other_code(c, current) for c in set(ok["git_commit"].tolist())}
    other = ok[ok["git_commit"].map(flags).astype(bool)] if not ok.empty else ok
    if other.empty:
        return None
    versions = sorted({_commit(c) or "unknown" for c in other["git_commit"]})
    shown = ", ".join(versions[:5]) + (f" and {len(versions) - 5} more" if len(versions) > 5 else "")
    return (f"{other['cell'].nunique()} of {ok['cell'].nunique()} cells were computed by another version of the code "
            f"({shown}) than this checkout ({current}): their numbers may not be what it computes; "
            "`lengthx run` with the same arguments recomputes a cell whose task, model or settings changed")
