"""The one sweep loop of ``lengthx run``, ``lengthx stats`` and paper B's perplexity (docs/design.md §1, §7).

A job kind (a paper-A run, dispersal statistics, perplexity) lists its cells with their hashes, says when one
is done, and computes one into result rows; :func:`sweep` does the rest the same way for all of them: a
finished cell is skipped, an OOM or exception in one cell becomes a ``status`` row and the sweep goes on
with the next setting, while a store that cannot be written or a model that cannot load stops it
(docs/results.md). A cell is computed under its lock (:meth:`lengthx.core.store.ResultsStore.cell_lock`): a cell
another process is computing is left for last, then waited for, and skipped when that process finished it.
A row whose value is not a finite number (a NaN score) is never ``ok``: the cell becomes an ``error`` row.
Every result row starts from :func:`row_fields`, the one place a row's columns are named.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any, Protocol

import torch
from filelock import Timeout

from lengthx.core.cells import Cell
from lengthx.core.store import (
    ResultsStore,
    StoreError,
    git_commit,
    job_overrides,
    now,
    record_sources,
    row_problem,
    versions,
)
from lengthx.errors import stopped_by_the_scheduler
from lengthx.models.loading import ModelNotAvailable

log = logging.getLogger("lengthx")

FATAL = (ModelNotAvailable, StoreError)  # no cell of the sweep could run, or none could be recorded


class CellJob(Protocol):
    """What :func:`sweep` needs from a job kind."""

    first_metric: str  # the metric a status row (oom / error) is filed under

    def cells(self) -> Iterable[tuple[Cell, str]]:
        """The cells to compute, each with its hash (:func:`lengthx.core.cells.cell_hash`)."""
        ...

    def is_done(self, cell: Cell, chash: str) -> bool:
        """Whether the store already holds this cell's finished rows."""
        ...

    def compute(self, cell: Cell, chash: str, start: float) -> list[dict[str, Any]]:
        """The cell's result rows (status ``ok``), built on :func:`row_fields`."""
        ...

    def row_fields(self, cell: Cell, chash: str, start: float) -> dict[str, Any]:
        """The columns every row of this cell shares (:func:`row_fields` with the job's values)."""
        ...


def row_fields(cell: Cell, chash: str, start: float, *, paper: str, table: Any, l_tr: Any, seed: Any,
               device: str, data: str = "") -> dict[str, Any]:
    """The columns shared by every row of one cell: identity, provenance and timing (docs/design.md §7).

    ``data`` names what the cell's examples were built from (:mod:`lengthx.data.provenance`: ``generated``, a
    file's name and hash, a hub dataset, ``stdlib-…``); empty when unknown."""
    return {
        "paper": paper, "table": table, "model": cell.model, "method": cell.method, "task": cell.task,
        "setting": cell.setting.label, "L_tr": l_tr, "seed": seed, "cell": cell.key, "config_hash": chash,
        "git_commit": git_commit(), "versions": versions(), "device": device,
        "seconds": round(time.time() - start, 2), "timestamp": now(), "data": data,
    }


def status_row(fields: dict[str, Any], metric: str, status: str, err: BaseException) -> dict[str, Any]:
    """The one row of a cell that failed (``oom`` or ``error``), with the error's first 500 characters."""
    return {**fields, "status": status, "metric": metric, "value": "", "n": 0,
            "message": f"{type(err).__name__}: {err}"[:500]}


def sweep(store: ResultsStore, job: CellJob) -> list[dict[str, Any]]:
    """Compute every cell of ``job`` that is not done into ``store``; one summary dict per cell, in the job's
    order (``cell``, ``status`` of ok / done / oom / error, and for a computed cell its first row's ``metric``,
    ``value``, ``tau`` and ``n``). Cells another process holds are done last, after waiting for it."""
    cells = list(job.cells())
    summary: dict[int, dict[str, Any]] = {}
    busy: list[int] = []
    estimated = False
    for k, (cell, chash) in enumerate(cells):
        if job.is_done(cell, chash):
            log.info("skip finished cell %s", cell.key)
            summary[k] = {"cell": cell.key, "status": "done"}
            continue
        start = time.time()
        outcome = _locked_cell(store, job, cell, chash, wait=False)
        if outcome is None:
            log.info("cell %s is being computed by another process; doing the others first", cell.key)
            busy.append(k)
            continue
        summary[k] = outcome
        if not estimated and outcome["status"] == "ok":
            estimated = True
            left = [c for c, h in cells[k + 1:] if not job.is_done(c, h)]
            if left:
                log.info(estimate(cell, time.time() - start, left))
    for k in busy:
        cell, chash = cells[k]
        log.info("waiting for the other process computing %s", cell.key)
        summary[k] = _locked_cell(store, job, cell, chash, wait=True)
    # the command each finished cell came from, so that `lengthx tables --check` can compute its hash again
    record_sources(store, [(cells[k][0].key, cells[k][1]) for k in range(len(cells))
                           if summary[k]["status"] in ("ok", "done")], job_overrides())
    return [summary[k] for k in range(len(cells))]


def _locked_cell(store: ResultsStore, job: CellJob, cell: Cell, chash: str, wait: bool) -> dict[str, Any] | None:
    """One cell under its lock: None when another process holds it and ``wait`` is False; ``done`` when the
    cell turned out finished once the lock was ours."""
    lock = store.cell_lock(cell.key)
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        return None
    try:
        if job.is_done(cell, chash):
            log.info("cell %s was finished by another process", cell.key)
            return {"cell": cell.key, "status": "done"}
        return compute_cell(store, job, cell, chash)
    finally:
        lock.release()


def compute_cell(store: ResultsStore, job: CellJob, cell: Cell, chash: str) -> dict[str, Any]:
    """Compute one cell into ``store`` (its rows, or one status row) and return its summary."""
    start = time.time()
    try:
        rows, status = job.compute(cell, chash, start), "ok"
        bad = next((why for r in rows if (why := row_problem(
            {k: "" if v is None else str(v) for k, v in r.items()})) is not None), None)
        if bad is not None:
            raise ValueError(f"the cell's {next(r['metric'] for r in rows)} row {bad} (an example scored NaN or "
                             "inf); nothing is recorded as ok")
    except (torch.OutOfMemoryError, MemoryError) as err:
        rows, status = [status_row(job.row_fields(cell, chash, start), job.first_metric, "oom", err)], "oom"
    except FATAL:
        raise
    except Exception as err:  # one failing cell must not sink the sweep
        if stopped_by_the_scheduler(err):
            raise
        log.error("cell %s failed: %s: %s (recorded as a status row; the sweep goes on)", cell.key,
                  type(err).__name__, err)
        rows, status = [status_row(job.row_fields(cell, chash, start), job.first_metric, "error", err)], "error"
    store.append_rows(rows, cell.key, chash)
    first = rows[0] if rows else {}
    if status != "ok" and torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"cell": cell.key, "status": status,
            **{k: first[k] for k in ("metric", "value", "tau", "n", "message") if k in first and first[k] != ""}}


def estimate(first: Cell, seconds: float, left: list[Cell]) -> str:
    """The time the cells ``left`` may take, from the first computed cell's ``seconds``: each scaled by its
    length over the first's (generation grows at least linearly with length; attention faster, so this is a
    floor), and the jobs of a ``-m`` sweep (``LENGTHX_SWEEP_JOBS``, set by the command) assumed alike."""
    def length(cell: Cell) -> float:
        same_unit = cell.setting.unit == first.setting.unit and first.setting.value > 0
        return cell.setting.value / first.setting.value if same_unit else 1.0

    rest = seconds * sum(max(1.0, length(c)) for c in left)
    text = (f"estimate: the first cell ({first.key}) took {seconds:.0f} s; the {len(left)} cell(s) left in this job "
            f"about {_duration(rest)} or more")
    jobs = int(os.environ.get("LENGTHX_SWEEP_JOBS", "1") or 1)
    if jobs > 1:
        text += f"; this sweep has {jobs} jobs, about {_duration((seconds + rest) * jobs)} in all if they are alike"
    return text


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
