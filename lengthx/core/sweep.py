"""The one sweep loop of ``lengthx run``, ``lengthx stats`` and paper B's perplexity (docs/design.md §1, §7).

A job kind (a paper-A run, dispersal statistics, perplexity) lists its cells with their hashes, says when one
is done, and computes one into result rows; :func:`sweep` does the rest the same way for all of them: a
finished cell is skipped, an OOM or exception in one cell becomes a ``status`` row and the sweep goes on
with the next setting, while a store that cannot be written or a model that cannot load stops it
(docs/results.md). Every result row starts from :func:`row_fields`, the one place a row's columns are named.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any, Protocol

import torch

from lengthx.core.cells import Cell
from lengthx.core.store import ResultsStore, StoreError, git_commit, now, versions
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
    """Compute every cell of ``job`` that is not done into ``store``; one summary dict per cell
    (``cell``, ``status`` of ok / done / oom / error, and for a computed cell its first row's ``metric``,
    ``value``, ``tau`` and ``n``)."""
    summary = []
    cells = list(job.cells())
    estimated = False
    for i, (cell, chash) in enumerate(cells):
        if job.is_done(cell, chash):
            log.info("skip finished cell %s", cell.key)
            summary.append({"cell": cell.key, "status": "done"})
            continue
        start = time.time()
        try:
            rows, status = job.compute(cell, chash, start), "ok"
        except (torch.OutOfMemoryError, MemoryError) as err:
            rows, status = [status_row(job.row_fields(cell, chash, start), job.first_metric, "oom", err)], "oom"
        except FATAL:
            raise
        except Exception as err:  # one failing cell must not sink the sweep
            log.error("cell %s failed: %s: %s (recorded as a status row; the sweep goes on)", cell.key,
                      type(err).__name__, err)
            rows, status = [status_row(job.row_fields(cell, chash, start), job.first_metric, "error", err)], "error"
        store.append_rows(rows, cell.key, chash)
        if not estimated and status == "ok":
            estimated = True
            left = [c for c, h in cells[i + 1:] if not job.is_done(c, h)]
            if left:
                log.info(estimate(cell, time.time() - start, left))
        first = rows[0] if rows else {}
        summary.append({"cell": cell.key, "status": status,
                        **{k: first[k] for k in ("metric", "value", "tau", "n") if k in first}})
        if status != "ok" and torch.cuda.is_available():
            torch.cuda.empty_cache()
    return summary


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
