"""Results store (docs/design.md §7, docs/results.md): tidy CSV rows with provenance, per-example JSONL records,
resume, locking.

- ``results.csv``: one row per (cell, metric); a cell is (model, method, task, setting) under one config. A
  cell recomputed after a repair replaces its rows under that config instead of adding to them.
- ``records/<cell>.jsonl``: one line per finished example, appended and flushed as it completes, so an
  interrupted cell continues where it stopped, and a later run that asks for more examples computes only the
  new ones. A record is reused only if its prompt hash still matches.
- Every write happens under a file lock, and a cell's rows are written in one ``O_APPEND`` write after
  checking (under the lock) that no other run has finished the same cell: rerunning never duplicates rows. A
  per-cell lock (:meth:`ResultsStore.cell_lock`) keeps two processes from computing one cell's examples twice.
- Every write is checked (:mod:`lengthx.core.store.files`): an append is written in full and fsynced, or the
  file is cut back to where it was and :class:`StoreError` names it (a full disk never leaves half a row); a file that replaces another
  (caches, a header that grows, tables) is written beside it and renamed. No write follows a symbolic link.
- A line cut short by a kill, a records line that is not a record (no id, no finite scores), a row whose value is
  not a finite number, or a cache whose τ is out of range, is moved to a ``<file>.corrupt-<timestamp>`` side file
  with a warning naming the file and line, and its cell (or example) is recomputed: a cell is done only when all
  its rows are present. A ``results.csv`` that does not parse stops every reader with the file, the line and the
  fix.

The store is split along its seams: what a row and a record are (:mod:`lengthx.core.store.schema`), checked writes
and side files (:mod:`lengthx.core.store.files`), repairs under the lock (:mod:`lengthx.core.store.repair`), where a
row came from (:mod:`lengthx.core.provenance`), the one-pass reading (:mod:`lengthx.core.store.cache`); this module
is the directory itself (:class:`ResultsStore`). The rest of lengthx imports all of them from the package's face,
:mod:`lengthx.core.store`.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

from lengthx.core.store.cache import (
    cached_frame,
    cached_records,
    fast_frame,
    file_version,
    keep_frame,
    keep_records,
)
from lengthx.core.store.duplicates import conflicting_lines
from lengthx.core.store.files import (
    StoreError,
    append_bytes,
    link_error,
    make_dirs,
    read_json,
    refuse_link,
    write_json,
)
from lengthx.core.store.mounts import node_local_locks, on_a_cluster
from lengthx.core.store.repair import (
    replace_rows,
    set_aside_lines,
    set_aside_rows,
    set_aside_torn_tail,
    upgrade_header,
)
from lengthx.core.store.schema import (
    BOM,
    COLUMNS,
    HEADER,
    STATUSES,
    TEXT_COLUMNS,
    csv_problem,
    csv_text,
    missing,
    parse_rows,
    record_problem,
    row_problem,
)
from lengthx.core.store.sidecar import data_digest, load_copy, save_copy

log = logging.getLogger("lengthx")


def safe_name(text: str) -> str:
    """A file-system-safe version of a cell key."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text)


# the folders of a results directory lengthx writes into (besides results.csv): none may lead out of it
STORE_FOLDERS = ("records", "calibration", "stats", "attention", "tables", "figures", ".cache", ".locks", ".hydra")


@dataclass
class ResultsStore:
    """The results directory of one profile: ``results.csv`` plus ``records/``."""

    root: Path

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.csv_path = self.root / "results.csv"
        self.records_dir = self.root / "records"
        self.lock = FileLock(str(self.root / ".results.lock"))

    # ---- the directory ------------------------------------------------------------------------------------
    def check(self) -> None:
        """Before any work: the directory is writable and leads nowhere else, a torn last row is set aside, every
        row parses, and a row that cannot be a result is set aside (its cell is recomputed)."""
        self.check_writable()
        with self.lock:
            set_aside_torn_tail(self.csv_path, "its cell is recomputed")
            self.read(repair=True)

    def check_writable(self) -> None:
        """``results_dir`` is (or can become) a directory this process can write files into, and nothing lengthx
        writes there is a symbolic link out of it."""
        where = f"results_dir={self.root}"
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"{where} is not a directory (a file has that name); pass results_dir= a "
                             "directory path (it is created if missing)")
        if self.csv_path.is_dir() and not self.csv_path.is_symlink():
            raise StoreError(f"{self.csv_path} is a directory, where lengthx keeps its results file; move it away "
                             f"(mv {self.csv_path} {self.csv_path}.dir) or pass results_dir= another directory")
        self.check_inside(self.csv_path)
        self.check_inside(self.root / ".results.lock")  # a lock file is opened with O_TRUNC
        for folder in STORE_FOLDERS:
            self.check_inside(self.root / folder)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for folder in (self.root, self.records_dir, self.root / "calibration"):
                if folder.is_dir():
                    fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
                    os.close(fd)
                    os.unlink(probe)
            for path in (self.csv_path, self.root / ".results.lock"):
                if path.exists():
                    open(path, "ab").close()
        except OSError as err:
            raise StoreError(f"{where} is not writable ({err.strerror or err}: {err.filename}); make it writable "
                             "or pass results_dir= a writable directory") from err
        self.check_lock_scope()

    def check_lock_scope(self) -> None:
        """The directory's file locks reach every machine that may write into it (:mod:`lengthx.core.store.mounts`):
        a mount that keeps them on one machine is refused in a SLURM job and named in a warning elsewhere."""
        reason = node_local_locks(self.root)
        if reason is None:
            return
        text = f"results_dir={self.root}: {reason}, which keeps its file locks on one machine"
        if on_a_cluster():
            raise StoreError(f"{text}: jobs on other machines would compute the same cells and could drop each "
                             "other's rows. Fix: pass results_dir= a directory whose locks span the machines (NFS "
                             "without nolock or local_lock, Lustre mounted with -o flock; docs/results.md)")
        log.warning("%s; run every job that writes into it on this machine (docs/results.md)", text)

    def check_inside(self, path: Path) -> None:
        """Raise :class:`StoreError` when ``path`` is a symbolic link (a file), or leads out of the results
        directory (a folder)."""
        if not os.path.islink(path):
            return
        if path.suffix or not path.resolve().is_dir() or not path.resolve().is_relative_to(self.root.resolve()):
            raise link_error(path)

    # ---- rows ---------------------------------------------------------------------------------------------
    def read(self, repair: bool = False) -> pd.DataFrame:
        """All rows (empty frame with the schema when there is no CSV yet); a torn last row is left out.

        A file that does not parse raises :class:`StoreError` with the line and the fix. A row that cannot be
        a result (:func:`row_problem`: an ``ok`` row whose value is NaN, …) is named with its line in a warning
        and left out; with ``repair`` (the caller holds the lock) it is also moved to a side file."""
        refuse_link(self.csv_path)
        version = file_version(self.csv_path)
        kept = cached_frame(self.csv_path.resolve(), version)  # parsed and checked already, unchanged since
        if kept is not None:
            return kept
        try:
            data = self.csv_path.read_bytes()
        except FileNotFoundError:
            return pd.DataFrame(columns=COLUMNS)
        except IsADirectoryError:
            self.check_writable()
            raise
        data = data[: data.rfind(b"\n") + 1]  # a row being written (or torn) is not a row yet
        if not data:
            return pd.DataFrame(columns=COLUMNS)
        digest = data_digest(data)
        copy = load_copy(self.root, digest)  # parsed and checked by an earlier process, the same bytes since
        if copy is not None:
            keep_frame(self.csv_path.resolve(), version, copy)
            return copy
        problem = csv_problem(data)
        if problem is not None:
            line, what = problem
            if data.startswith(BOM):
                fix = f"remove those three bytes: sed -i '1s/^\\xEF\\xBB\\xBF//' {self.csv_path}"
            elif line == 1:
                fix = f"put the header back as line 1, exactly: {HEADER}"
            else:
                fix = (f"delete that line (sed -i '{line}d' {self.csv_path}); the cells it held are recomputed on "
                       "the next run")
            raise StoreError(f"{self.csv_path}: line {line} {what}. Fix: {fix}")
        text = data.decode("utf-8")
        if text.split("\n", 1)[0].rstrip("\r") == HEADER:  # the current schema: one pass when every row is sound
            fast = fast_frame(text, TEXT_COLUMNS, STATUSES, row_problem)
            if fast is not None:
                fast["data"] = fast["data"].fillna("")
                keep_frame(self.csv_path.resolve(), version, fast)
                save_copy(self.root, digest, fast)
                return fast
        rows, bad = parse_rows(text)
        if bad:
            bad = set_aside_rows(self.csv_path, text, bad) if repair else bad
            for _, line, why in bad:
                log.warning("%s: line %d %s; %s", self.csv_path, line, why,
                            "moved it to a side file (its cell is recomputed)" if repair else
                            "left out (the next lengthx run sets it aside and recomputes its cell)")
            skip = {k for k, _, _ in bad}
            rows = [r for k, r in enumerate(rows) if k not in skip]
        width = len(COLUMNS)
        clean = csv_text([COLUMNS] + [r + [""] * (width - len(r)) for r in rows])
        df = pd.read_csv(io.StringIO(clean), dtype=dict.fromkeys(TEXT_COLUMNS, str), keep_default_na=False,
                         na_values=[""])
        df["data"] = df["data"].fillna("")  # "" = unknown: a row written before rows named their data
        if not bad:  # a file with rows left out warns at every read until a run sets them aside
            keep_frame(self.csv_path.resolve(), version, df)
            save_copy(self.root, digest, df)
        return df

    @staticmethod
    def done_in(df: pd.DataFrame, cell: str, config_hash: str, metrics: Iterable[str] | None, n: int | None) -> bool:
        """Whether the rows ``df`` hold ``cell`` done under ``config_hash`` (:meth:`is_done`)."""
        if df.empty:
            return False
        hit = df[(df["cell"] == cell) & (df["config_hash"] == config_hash) & (df["status"] == "ok")]
        if n is not None:
            hit = hit[pd.to_numeric(hit["n"], errors="coerce") >= n]
        if metrics is None:
            return not hit.empty
        return set(metrics) <= set(hit["metric"])

    def sound_rows(self) -> pd.DataFrame | None:
        """The rows, when the file is whole and the parsed copy beside it (:mod:`lengthx.core.store.sidecar`) is of
        its bytes: every row was sound when it was last read in full. None otherwise (no file, a torn last row, a
        row to set aside): the caller takes the path that checks and repairs (:meth:`check`)."""
        refuse_link(self.csv_path)
        try:
            data = self.csv_path.read_bytes()
        except OSError:
            return None
        if not data.endswith(b"\n"):
            return None
        return load_copy(self.root, data_digest(data))

    def is_done(self, cell: str, config_hash: str, metrics: Iterable[str] | None = None, n: int | None = None) -> bool:
        """Whether ``ok`` rows exist for this cell under this configuration: one per metric of ``metrics`` when
        given, so a cell whose rows were cut short is not done; with ``n``, rows of at least ``n`` examples (a
        finished larger run counts: its first ``n`` examples are the ones asked for)."""
        return self.done_in(self.read(), cell, config_hash, metrics, n)

    def append_rows(self, rows: Iterable[dict[str, Any]], cell: str, config_hash: str) -> bool:
        """Write a cell's rows atomically; returns False (and writes nothing) if the cell is already done with at
        least as many examples as the new rows hold. ``ok`` rows left under the same cell and hash (a cell whose
        other rows were torn off, or a smaller run) are replaced, never kept beside the new ones."""
        rows = [{k: "" if k != "value" and missing(v) else v for k, v in r.items()} for r in rows]
        for r in rows:
            unknown = set(r) - set(COLUMNS)
            if unknown:
                raise KeyError(f"unknown result columns {sorted(unknown)}")
            if r.get("status") not in STATUSES:
                raise ValueError(f"status must be one of {STATUSES}, got {r.get('status')!r}")
            why = row_problem({k: "" if r.get(k) is None else str(r.get(k, "")) for k in COLUMNS})
            if why is not None:
                raise ValueError(f"cell {cell}: a row {why}; it is not written")
        make_dirs(self.root)
        with self.lock:
            set_aside_torn_tail(self.csv_path, "its cell is recomputed")
            existing = self.read()
            ok_metrics = {r["metric"] for r in rows if r["status"] == "ok"}
            n = max((int(r.get("n") or 0) for r in rows if r["status"] == "ok"), default=None)
            if ok_metrics and self.done_in(existing, cell, config_hash, ok_metrics, n):
                return False
            upgrade_header(self.csv_path)
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
            if not self.csv_path.exists() or self.csv_path.stat().st_size == 0:
                writer.writeheader()
            for r in rows:
                writer.writerow({k: r.get(k, "") for k in COLUMNS})
            survivors = not existing.empty and ok_metrics and (
                (existing["cell"] == cell) & (existing["config_hash"] == config_hash)
                & (existing["status"] == "ok")).any()
            if survivors:
                replace_rows(self.csv_path, cell, config_hash, buf.getvalue())
            else:
                append_bytes(self.csv_path, buf.getvalue().encode())
        return True

    # ---- one cell at a time ----------------------------------------------------------------------------------
    def cell_lock(self, cell: str) -> FileLock:
        """The lock a process holds while it computes ``cell`` (``.locks/<cell>.lock``), so that a second process
        on the same cell waits for it (or does other cells first) instead of computing every example again."""
        folder = self.root / ".locks"
        make_dirs(folder)
        path = folder / f"{safe_name(cell)}.lock"
        refuse_link(path)
        return FileLock(str(path))

    # ---- checkpoint digests ----------------------------------------------------------------------------------
    @property
    def digests_path(self) -> Path:
        """The weight files' SHA-256 by file version (:data:`lengthx.models.loading.DIGESTS`), kept across runs."""
        return self.root / ".cache" / "digests.json"

    def fingerprinted(self, fingerprint: Callable[[], str]) -> str:
        """``fingerprint()`` of a checkpoint with the weight digests earlier runs into this directory computed (the
        weights are hashed in full once per file version, :data:`lengthx.models.loading.DIGESTS`), the new ones
        kept here for later runs."""
        from lengthx.models.loading import DIGESTS

        DIGESTS.update(self.load_digests())
        value = fingerprint()
        self.save_digests(DIGESTS)
        return value

    def load_digests(self) -> dict[str, str]:
        """The digests computed by earlier runs into this directory (a damaged file is set aside)."""
        cached = read_json(self.digests_path)
        return {str(k): str(v) for k, v in (cached or {}).items() if re.fullmatch(r"[0-9a-f]{64}", str(v))}

    def save_digests(self, digests: dict[str, str]) -> None:
        """Keep ``digests`` for later runs when it holds any this directory does not have yet."""
        if not self.root.is_dir():
            return
        known = self.load_digests()
        if set(digests) - set(known):
            write_json(self.digests_path, {**known, **digests})

    # ---- per-example records ------------------------------------------------------------------------------
    def records_path(self, cell: str) -> Path:
        return self.records_dir / f"{safe_name(cell)}.jsonl"

    @staticmethod
    @functools.lru_cache(maxsize=1 << 18)
    def records_name(cell: str) -> str:
        """The file name of a cell's records (:meth:`records_path` without the directory; kept per process, as
        the tables ask it of the same cells)."""
        return f"{safe_name(cell)}.jsonl"

    def records_files(self) -> frozenset[str]:
        """The names of the records files present (one directory listing, for a reader of many cells)."""
        try:
            return frozenset(entry.name for entry in os.scandir(self.records_dir))
        except OSError:
            return frozenset()

    def load_records(self, cell: str, repair: bool = False) -> dict[str, dict[str, Any]]:
        """Finished examples of a cell by example id, in the order they were first written (for an id recomputed
        under another configuration, its last record; two records of one id under one configuration are a
        conflict, :mod:`lengthx.core.store.duplicates`, named and left out like a bad line).

        A line that is not a record (cut short by a kill, not UTF-8, not JSON, no ``id``, no finite ``scores``) is
        named by file and line in a warning and left out, so its example is recomputed; with ``repair`` (a run
        about to compute the cell) it is also moved to a ``.corrupt-<timestamp>`` side file. A records file that
        is a symbolic link is refused."""
        path = self.records_path(cell)
        refuse_link(path)
        version = None if repair else file_version(path)
        if version is None and not repair:
            return {}
        kept = cached_records(path.resolve(), version)  # read already in this process, unchanged since
        if kept is not None:
            return kept
        if not path.exists():
            return {}
        with self.lock if repair else contextlib.nullcontext():
            lines = path.read_bytes().splitlines(keepends=True)
            parsed: list[tuple[int, dict[str, Any]]] = []
            bad: list[tuple[int, str]] = []
            for number, line in enumerate(lines, 1):
                rec, why = record_problem(line)
                if rec is not None:
                    parsed.append((number, rec))
                elif line.strip():
                    bad.append((number, str(why)))
            conflicts = conflicting_lines(parsed)
            bad = sorted(bad + list(conflicts.items()))
            out: dict[str, dict[str, Any]] = {}
            for number, rec in parsed:
                if number not in conflicts:
                    out[rec["id"]] = rec  # an id recomputed under a new configuration: its first place, last record
            if not bad:
                keep_records(path.resolve(), version, out)
                return out
            where = "skipped; the next lengthx run recomputes its example"
            if repair:
                numbers = {n for n, _ in bad}
                side = set_aside_lines(path, lines, numbers)
                where = f"moved it to {side} (its example is recomputed)"
        for number, why in bad:
            log.warning("%s: line %d %s; %s", path, number, why, where)
        return out

    def append_record(self, cell: str, record: dict[str, Any]) -> None:
        """Append one example's record and flush it to disk before returning."""
        make_dirs(self.records_dir)
        path = self.records_path(cell)
        with self.lock:
            set_aside_torn_tail(path, "its example is recomputed")  # else the new record would glue onto it
            append_bytes(path, (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))


def _place(position: int, record: dict[str, Any]) -> int:
    """A record's place in its task's seeded sequence of examples: its ``index``; for a record written before
    records carried one, the ``<seed>-<i>`` of its id, else its position in the file."""
    if isinstance(record.get("index"), int):
        return record["index"]
    m = re.fullmatch(r"-?\d+-(\d+)", str(record.get("id")))
    return int(m.group(1)) if m else position


def first_records(records: dict[str, dict[str, Any]], n: int) -> dict[str, dict[str, Any]]:
    """The first ``n`` examples of a cell's records, in the order of the task's seeded sequence (:func:`_place`)."""
    ordered = sorted(enumerate(records.items()), key=lambda kv: (_place(kv[0], kv[1][1]), kv[0]))
    return dict(item for _, item in ordered[:n])
