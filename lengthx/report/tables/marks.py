"""What a paper A table says about its cells beyond their values (docs/results.md, "Reading a mini table"):

- **The stand-in at its training length.** A column per task holds the model's τ = 1 score at L_tr: the cell of
  ``lengthx run method=none 'task.settings=[L_tr]' task.unit=tokens`` (label ``<L_tr>tokens``, the same task and
  format as the table's columns; for retrieval, the benchmark's records at that length). Where a task's score
  there is below :data:`L_TR_BAR`, the caption says the model does not do the task at L_tr, so its columns say
  nothing about τ: a zero past L_tr is then a model that never learned, not one that fell. Temperature tables
  (τ is 1 at L_tr) get the caption only.
- **A task handed to another stand-in.** Where a shipped mini hands a task to another (``task_minis``,
  :mod:`lengthx.models.minis`), the caption names the stand-in that computed that task's cells of its rows.
- **Stale cells** (:mod:`lengthx.core.currency`): computed for a checkpoint, prompt or config that has changed
  since; marked :data:`STALE_MARK`, never shown as if current.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from lengthx.models.minis import mini_config, task_minis
from lengthx.report.tables.entries import STALE_MARK, Entry
from lengthx.report.tables.spec import Column, TableSpec

L_TR = "@L_tr"  # the setting label of the L_tr column (never a task's own label)
L_TR_BAR = 50.0  # % on a right-or-wrong metric below which a model "does not do" a task at L_tr
BAR_METRICS = ("accuracy", "exact_match")  # the metrics the bar applies to (edit similarity, perplexity: none)

STALE_NOTE = (f"{STALE_MARK} stale: the cell was computed for a checkpoint, prompt or config that has since changed "
              "(`lengthx tables --check` names why); rerunning the command that computed it computes it afresh.")


def l_tr_rows(ok: pd.DataFrame, tasks: set[str]) -> pd.DataFrame:
    """The τ = 1 rows of ``tasks`` at each model's own training length (setting ``<L_tr>tokens``)."""
    if ok.empty or "L_tr" not in ok.columns:
        return ok.iloc[0:0]
    l_tr = pd.to_numeric(ok["L_tr"], errors="coerce")
    label = pd.Series("", index=ok.index, dtype=object)
    label[l_tr.notna()] = l_tr[l_tr.notna()].astype("int64").astype(str) + "tokens"
    return ok[(ok["method"] == "none") & ok["task"].isin(tasks) & (ok["setting"].astype(str) == label)]


def with_l_tr(spec: TableSpec, ok: pd.DataFrame,
              stale: set[str] | frozenset[str] = frozenset()) -> tuple[TableSpec, pd.DataFrame, set[str] | frozenset[str]]:
    """``spec`` with an L_tr column first in each task's group, ``ok`` with each L_tr row copied under the
    setting :data:`L_TR` (the same ``cell``, so its records and interval are the L_tr cell's), and ``stale`` with
    those copies' keys where their cell is stale. Unchanged for a table that has its own L_tr columns (Tables 1,
    7), a temperature table, or when no L_tr cell was run."""
    metrics = {c.metric for c in spec.columns}
    if "tau" in metrics or any(c.setting == "L_tr" for c in spec.columns):
        return spec, ok, stale
    found = l_tr_rows(ok, spec.tasks)
    if found.empty:
        return spec, ok, stale
    stale = set(stale) | {f"{m}|none|{t}|{L_TR}" for m, t, c in zip(found["model"].tolist(), found["task"].tolist(),
                                                                     found["cell"].tolist(), strict=True) if c in stale}
    columns: list[Column] = []
    paper: list[int] = []
    for j, c in enumerate(spec.columns):
        if not any(o.task == c.task and o.metric == c.metric and o.setting == L_TR for o in columns):
            columns.append(Column(c.group, c.task, L_TR, c.metric, header="L_tr"))
            paper.append(10**6)  # no published column
        columns.append(c)
        paper.append(spec.paper_column(j))
    if spec.avg:
        paper.append(spec.paper_column(len(spec.columns)))
    return (replace(spec, columns=tuple(columns), paper_columns=tuple(paper)),
            pd.concat([ok, found.assign(setting=L_TR)], ignore_index=True), stale)


def row_average(spec: TableSpec, vals: list[float | None]) -> float | None:
    """A row's "Avg." over its columns at the table's lengths (never the L_tr column)."""
    part = [v for c, v in zip(spec.columns, vals, strict=True) if c.setting != L_TR]
    return sum(part) / len(part) if part and all(v is not None for v in part) else None


def l_tr_notes(spec: TableSpec, ok: pd.DataFrame, intervals: dict, models: list[str],
               info: dict[str, dict[str, str]]) -> list[str]:
    """One caption line per stand-in and task whose τ = 1 score at L_tr is below :data:`L_TR_BAR` (or, on a
    temperature table, every task's score at L_tr); a stand-in with no L_tr cell for a task is named too."""
    if any(c.setting == "L_tr" for c in spec.columns):  # Tables 1, 7: the dispersal at L_tr is their own column
        return []
    found = l_tr_rows(ok, spec.tasks)
    out: list[str] = []
    for model in models:
        meta = info.get(model, {})
        if not meta.get("stand_in"):
            continue
        display = meta.get("display", model)
        for task in dict.fromkeys(c.task for c in spec.columns):
            mine = found[(found["model"] == model) & (found["task"] == task)]
            scored = mine[mine["metric"].isin(BAR_METRICS)]
            if mine.empty:
                out.append(f"{display}'s score on {task} at its training length is not measured, so a low value "
                           "past it cannot be told from a task never learned (`make reproduce-mini-a` runs it).")
                continue
            if scored.empty:
                continue
            r = scored.iloc[0]
            v = float(r["value"])
            iv = intervals.get((model, "none", task, str(r["setting"]), str(r["metric"])))
            shown = f"{v:.0f}%" + (f" [{iv.low:.0f}, {iv.high:.0f}]" if iv is not None else "") + \
                f", n = {int(float(r['n']))} at {int(float(r['L_tr']))} tokens"
            if not math.isnan(v) and v < L_TR_BAR:
                out.append(f"This stand-in ({display}) does not do {task} at L_tr ({shown}; bar {L_TR_BAR:.0f}%): "
                           f"these {task} columns carry no signal about τ.")
            elif "tau" in {c.metric for c in spec.columns}:
                out.append(f"{display} at L_tr on {task}: {shown} (τ = 1).")
    return out


def handed_on_notes(spec: TableSpec, ok: pd.DataFrame, models: list[str],
                    info: dict[str, dict[str, str]]) -> list[str]:
    """One caption line per shipped mini of the table and task of its columns that the mini hands to another
    stand-in (``task_minis``), where the table holds that mini's rows of the task."""
    out: list[str] = []
    tasks = dict.fromkeys(c.task for c in spec.columns)
    for model in models:
        if not info.get(model, {}).get("stand_in"):
            continue
        for task, other in task_minis(model).items():
            if task in tasks and not ok.empty and ((ok["model"] == model) & (ok["task"] == task)).any():
                cfg = mini_config(other)
                out.append(f"{info[model].get('display', model)}'s {task} cells are computed by the stand-in that "
                           f"does {task} at L_tr, {cfg.get('display', other)} (conf/model/{other}.yaml): "
                           f"{cfg.get('description', '')}.")
    return out


def mark_stale(cells: list[Entry], spec: TableSpec, model: str, method: str,
               stale: set[str] | frozenset[str]) -> None:
    """Mark the cells of one row whose cell key is in ``stale`` (:data:`STALE_MARK`)."""
    if not stale:
        return
    for e, c in zip(cells, spec.columns, strict=False):
        e.stale = e.shown and not c.average_of and f"{model}|{method}|{c.task}|{c.setting}" in stale


def notes_for(spec: TableSpec, ok: pd.DataFrame, intervals: dict, models: list[str], info: dict[str, dict[str, str]],
              body: list[tuple[str, list[Entry], bool]]) -> list[str]:
    """The captions of this module for one rendered table: the stand-ins tasks are handed to, L_tr, then the stale
    note where a cell is marked."""
    out = handed_on_notes(spec, ok, models, info) + l_tr_notes(spec, ok, intervals, models, info)
    if any(e.stale for _, cells, _ in body for e in cells):
        out.append(STALE_NOTE)
    return out
