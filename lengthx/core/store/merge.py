"""Merging a results store measured elsewhere into this one (docs/results.md; docs/gpu.md, "Merging a GPU call's
stores back").

A lent GPU measures cells into a copy of a store and hands the copy back; meanwhile the store here may have grown
too (a CPU run on the same cells). :func:`merge_store` brings the copy's work in without ever holding two records of
one example under one configuration (which :mod:`lengthx.core.store.duplicates` would set aside as a conflict):

- a cell (cell key and ``config_hash``) finished in the copy and not here is **taken over**: its ``ok`` rows are
  written with :meth:`ResultsStore.append_rows`, and its records under that hash become the copy's (a partial run's
  records here, under the same hash, are dropped, so the rows and the records they summarise come from one run);
- any other example record the copy has and this store lacks (by ``id`` and ``config_hash``) is appended, so a
  cell unfinished on both sides resumes with the union; a record present on both sides stays as it is here;
- a status row (``oom``, ``error``) is added for a cell not finished here, unless the same row is here already;
- files of ``calibration/``, ``stats/`` and ``attention/`` are copied where absent; one present here with other
  content is kept and reported as a conflict.

A cell being computed here right now (its lock in ``.locks/`` is held) is skipped and reported: merge again once
that run has finished. Merging the same copy twice adds nothing.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from filelock import Timeout

from lengthx.core.store.files import append_bytes, make_dirs, write_atomic
from lengthx.core.store.repair import set_aside_torn_tail
from lengthx.core.store.results import ResultsStore, StoreError
from lengthx.core.store.schema import csv_problem, record_problem

# folders of per-cell files copied where absent (records/ and results.csv are merged line by line)
FILE_FOLDERS = ("calibration", "stats", "attention")


@dataclass
class MergeReport:
    """What :func:`merge_store` did: cells whose rows it added, rows, records and files it wrote, and what it left."""

    cells: int = 0
    rows: int = 0
    records: int = 0
    files: int = 0
    busy: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def line(self) -> str:
        text = f"{self.cells} cells ({self.rows} rows), {self.records} records, {self.files} files"
        if self.busy:
            text += f"; {len(self.busy)} cells being computed here, skipped (merge again later): {', '.join(self.busy)}"
        if self.conflicts:
            text += f"; {len(self.conflicts)} files differ here, kept as they are: {', '.join(self.conflicts)}"
        return text


def _source_rows(store: ResultsStore) -> list[dict[str, str]]:
    """The copy's rows as text, as written (a torn last row left out); a file that does not parse stops the merge."""
    try:
        data = store.csv_path.read_bytes()
    except FileNotFoundError:
        return []
    data = data[: data.rfind(b"\n") + 1]
    problem = csv_problem(data) if data else None
    if problem is not None:
        raise StoreError(f"{store.csv_path}: line {problem[0]} {problem[1]}; nothing merged from it. Fix: repair "
                         f"it with a lengthx run into that directory, then merge again")
    return [dict(r) for r in csv.DictReader(io.StringIO(data.decode("utf-8"), newline=""))]


def _records(path: Path) -> list[tuple[bytes, tuple[str, str] | None]]:
    """Each line of a records file with its (id, config_hash), None for a line that is not a record."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_bytes().splitlines(keepends=True):
        rec, _ = record_problem(line)
        out.append((line, (rec["id"], str(rec.get("config_hash"))) if rec is not None else None))
    return out


def _merge_records(source: Path, target: Path, takeover: set[str]) -> int:
    """Merge one records file (the caller holds the target store's lock and the cell's lock); returns the records
    written. Lines of a hash in ``takeover`` are the copy's alone; otherwise the copy's records absent here are
    appended."""
    set_aside_torn_tail(target, "its example is recomputed")
    here = _records(target)
    keys = {k for _, k in here if k is not None}
    kept = [(line, k) for line, k in here if k is None or k[1] not in takeover]
    new: list[bytes] = []
    seen: set[tuple[str, str]] = set()
    for line, k in _records(source):
        if k is None or k in seen:
            continue
        seen.add(k)
        if k[1] in takeover or k not in keys:
            new.append(line)
    if len(kept) == len(here):
        if new:
            append_bytes(target, b"".join(new))
        return len(new)
    write_atomic(target, b"".join(line for line, _ in kept) + b"".join(new))
    return len(new)


def _cell_groups(rows: list[dict[str, str]]) -> dict[tuple[str, str], list[dict[str, str]]]:
    groups: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in rows:
        groups.setdefault((r.get("cell") or "", r.get("config_hash") or ""), []).append(r)
    return groups


def _finished(rows: list[dict[str, str]]) -> tuple[list[dict[str, str]], set[str], int | None]:
    ok = [r for r in rows if r.get("status") == "ok"]
    n = max((int(float(r.get("n") or 0)) for r in ok), default=None)
    return ok, {r["metric"] for r in ok}, n


def _merge_rows(dst: ResultsStore, cell: str, chash: str, rows: list[dict[str, str]], report: MergeReport) -> None:
    """One cell's rows from the copy: its ``ok`` rows unless done here; its status rows, when the cell is not done
    here, unless the same row (metric, status, time) is here already."""
    ok, _, _ = _finished(rows)
    if ok and dst.append_rows(ok, cell, chash):
        report.cells += 1
        report.rows += len(ok)
    status = [r for r in rows if r.get("status") != "ok"]
    if not status or dst.done_in(now := dst.read(), cell, chash, None, None):
        return
    mine = now[(now["cell"] == cell) & (now["config_hash"] == chash)] if not now.empty else now
    present = set(mine[["metric", "status", "timestamp"]].astype(str).itertuples(index=False, name=None))
    fresh = [r for r in status if (r.get("metric"), r.get("status"), r.get("timestamp")) not in present]
    if fresh:
        dst.append_rows(fresh, cell, chash)
        report.rows += len(fresh)


def merge_store(source: Path, target: Path) -> MergeReport:
    """Merge the store at ``source`` (a copy measured elsewhere) into the store at ``target`` (module doc)."""
    src, dst = ResultsStore(source), ResultsStore(target)
    if not src.csv_path.is_file() and not src.records_dir.is_dir():
        raise StoreError(f"{source} holds no results store (no results.csv, no records/). Fix: pass the directory "
                         "that holds them")
    dst.check()
    report = MergeReport()
    here = dst.read()
    groups = _cell_groups(_source_rows(src))
    takeover: dict[str, set[str]] = {}  # records file name -> hashes whose records become the copy's
    for (cell, chash), rows in groups.items():
        _, metrics, n = _finished(rows)
        if metrics and not dst.done_in(here, cell, chash, metrics, n) and src.records_path(cell).is_file():
            takeover.setdefault(dst.records_path(cell).name, set()).add(chash)
    busy: set[str] = set()
    held = []  # the cells' locks, held until their records and rows are both written
    names = sorted(p.name for p in src.records_dir.glob("*.jsonl")) if src.records_dir.is_dir() else []
    try:
        for name in sorted(set(names) | set(takeover)):
            lock = dst.cell_lock(name.removesuffix(".jsonl"))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                busy.add(name)
                continue
            held.append(lock)
            make_dirs(dst.records_dir)
            with dst.lock:
                report.records += _merge_records(src.records_dir / name, dst.records_dir / name,
                                                 takeover.get(name, set()))
        for (cell, chash), rows in groups.items():
            if dst.records_path(cell).name not in busy:
                _merge_rows(dst, cell, chash, rows, report)
    finally:
        for lock in held:
            lock.release()
    report.busy = sorted(name.removesuffix(".jsonl") for name in busy)
    for rel, data in _files(source):
        path = target / rel
        if not path.exists():
            make_dirs(path.parent)
            write_atomic(path, data)
            report.files += 1
        elif path.read_bytes() != data:
            report.conflicts.append(str(rel))
    return report


def _files(root: Path) -> Iterator[tuple[Path, bytes]]:
    for folder in FILE_FOLDERS:
        for path in sorted((root / folder).rglob("*")) if (root / folder).is_dir() else []:
            if path.is_file() and not path.is_symlink():
                yield path.relative_to(root), path.read_bytes()


def stores_under(root: Path) -> list[Path]:
    """Every results store below ``root`` (a folder holding ``results.csv`` or ``records/``), as paths relative to
    it, dot-folders left out."""
    found = {p.parent for p in root.rglob("results.csv")} | {p.parent for p in root.rglob("records") if p.is_dir()}
    return sorted(p.relative_to(root) for p in found
                  if not any(part.startswith(".") for part in p.relative_to(root).parts))


def merge_tree(source: Path, target: Path) -> dict[str, MergeReport]:
    """:func:`merge_store` for every store below ``source`` into the same place below ``target``."""
    return {str(rel): merge_store(source / rel, target / rel) for rel in stores_under(source)}


__all__ = ["FILE_FOLDERS", "MergeReport", "merge_store", "merge_tree", "stores_under"]
