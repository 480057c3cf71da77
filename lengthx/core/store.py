"""Results store (docs/design.md §7, docs/results.md): tidy CSV rows with provenance, per-example JSONL records,
resume, locking.

- ``results.csv``: one row per (cell, metric); a cell is (model, method, task, setting) under one config.
- ``records/<cell>.jsonl``: one line per finished example, appended and flushed as it completes, so an
  interrupted cell continues where it stopped. A record is reused only if its prompt hash still matches.
- Every write happens under a file lock, and a cell's rows are written in one ``O_APPEND`` write after
  checking (under the lock) that no other run has finished the same cell: rerunning never duplicates rows.
- Every write is checked: an append is written in full and fsynced, or the file is cut back to where it was
  and :class:`StoreError` names it (a full disk never leaves half a row); caches are replaced by a rename.
- A line cut short by a kill, or a records line that is not a record, is moved to a
  ``<file>.corrupt-<timestamp>`` side file with a warning naming both, and its cell (or example) is
  recomputed: a cell is done only when all its rows are present. A ``results.csv`` that does not parse
  stops every reader with the file, the line and the fix.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import logging
import os
import platform
import re
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

from lengthx.errors import UserError

log = logging.getLogger("lengthx")

COLUMNS = [
    "paper", "table", "model", "method", "task", "setting", "metric", "value", "n", "tau", "L_tr", "L_req",
    "L_ex", "seed", "status", "message", "cell", "config_hash", "git_commit", "versions", "device", "seconds",
    "timestamp", "data",
]
HEADER = ",".join(COLUMNS)
# results.csv files written before rows named their data (the last column): read with ``data`` empty (unknown),
# appended to as they are (new rows carry the extra field), never rewritten
LEGACY_COLUMNS = COLUMNS[:-1]
STATUSES = ("ok", "oom", "error")


class StoreError(UserError, RuntimeError):
    """A results file or directory that needs attention; the message names it (and the line) and the fix."""


def safe_name(text: str) -> str:
    """A file-system-safe version of a cell key."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text)


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the lengthx checkout, with ``+dirty`` when it has uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha or "unknown") + ("+dirty" if dirty else "")


@lru_cache(maxsize=1)
def versions() -> str:
    """Versions of the libraries that decide the numbers."""
    import torch
    import transformers

    return f"python={platform.python_version()};torch={torch.__version__};transformers={transformers.__version__}"


# ---- checked writes ---------------------------------------------------------------------------------------
def _write_error(path: Path, err: OSError) -> StoreError:
    return StoreError(f"{path}: could not write it ({err.strerror or err}); nothing partial was kept. Free disk "
                      "space (or make the directory writable) and rerun the same command")


def _write_fully(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (POSIX allows short writes); OSError when none progresses."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "No space left on device (a write made no progress)")
        view = view[written:]


def append_bytes(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` in full and fsync it, or leave ``path`` as it was and raise
    :class:`StoreError` (the caller holds the store's lock)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as err:
        raise _write_error(path, err) from err
    try:
        start = os.fstat(fd).st_size
        try:
            _write_fully(fd, data)
            os.fsync(fd)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)  # no half row or record stays behind
            raise _write_error(path, err) from err
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data``: a temporary file beside it, written in full and fsynced, then renamed."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_fully(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _write_error(path, err) from err


def make_dirs(path: Path) -> None:
    """``mkdir -p`` that fails as a :class:`StoreError` naming the directory."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreError(f"cannot create {path} ({err.strerror or err}); make its parent writable or pass "
                         "results_dir= a writable directory") from err


# ---- side files -------------------------------------------------------------------------------------------
def side_file(path: Path) -> Path:
    """A new ``<name>.corrupt-<timestamp>`` path beside ``path``, for lines or files set aside."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, k = path.with_name(f"{path.name}.corrupt-{stamp}"), 1
    while candidate.exists():
        k += 1
        candidate = path.with_name(f"{path.name}.corrupt-{stamp}-{k}")
    return candidate


def _save_aside(path: Path, data: bytes) -> Path:
    side = side_file(path)
    write_atomic(side, data)
    return side


def set_aside_torn_tail(path: Path, consequence: str) -> Path | None:
    """Move a last line without its newline (a write cut short by a kill) to a side file; returns the side file.

    The caller holds the store's lock. Every whole line before it stays as it is."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return None
        fh.seek(0)
        data = fh.read()
    cut = data.rfind(b"\n") + 1
    side = _save_aside(path, data[cut:])
    try:
        os.truncate(path, cut)
    except OSError as err:
        raise _write_error(path, err) from err
    log.warning("%s: line %d was cut short by an interrupted write; moved it to %s (%s)", path,
                data.count(b"\n", 0, cut) + 1, side, consequence)
    return side


# ---- parsing ----------------------------------------------------------------------------------------------
def csv_problem(data: bytes) -> tuple[int, str] | None:
    """(line number, what is wrong) of the first line of ``results.csv`` bytes that is not a row, or None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return data.count(b"\n", 0, err.start) + 1, f"holds byte 0x{data[err.start]:02x}, which is not UTF-8 text"
    if "\x00" in text:
        return text.count("\n", 0, text.index("\x00")) + 1, "holds a NUL byte"
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    widths = (len(COLUMNS),)
    try:
        for row in reader:
            if reader.line_num == 1:
                if row not in (COLUMNS, LEGACY_COLUMNS):
                    return 1, "is not the header"
                if row == LEGACY_COLUMNS:  # an older file: its rows and the rows appended since
                    widths = (len(LEGACY_COLUMNS), len(COLUMNS))
            if len(row) not in widths:
                return reader.line_num, f"has {len(row)} fields, not {len(COLUMNS)}"
    except csv.Error as err:
        return reader.line_num, f"does not parse as CSV ({err})"
    return None


def _record_problem(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) for a records line that is a JSON object with a string ``id``, else (None, why)."""
    if not line.endswith(b"\n"):
        return None, "was cut short by an interrupted write"
    try:
        rec = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as err:
        return None, f"holds byte 0x{line[err.start]:02x} at column {err.start + 1}, which is not UTF-8 text"
    except json.JSONDecodeError as err:
        return None, f"is not JSON ({err.msg} at column {err.colno})"
    if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
        return None, 'is not a record (no "id")'
    return rec, None


def read_json(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """A JSON cache file as a dict, or None when it is absent or damaged.

    A damaged one (not UTF-8 JSON, not an object, or without a ``required`` key) is moved to a side file with a
    warning naming both, so the caller recomputes it instead of failing on every rerun."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(data.decode("utf-8"))
        missing = [k for k in required if k not in obj] if isinstance(obj, dict) else []
        why = "is not a JSON object" if not isinstance(obj, dict) else f"has no {missing[0]!r}" if missing else None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        why = f"is not JSON ({err})"
    if why is None:
        return obj
    side = side_file(path)
    try:
        os.replace(path, side)
    except OSError as err:
        raise _write_error(path, err) from err
    log.warning("%s %s; moved it to %s (it is recomputed)", path, why, side)
    return None


def write_json(path: Path, obj: Any) -> None:
    """Write a JSON cache file atomically (a reader sees the old file or the new one, never half of one)."""
    make_dirs(path.parent)
    write_atomic(path, json.dumps(obj, indent=1).encode())


def _with_data_column(data: bytes) -> bytes:
    """A results file with the :data:`LEGACY_COLUMNS` header as the current schema, in memory: the header
    gains ``data`` and every row without it an empty field. The file itself is left as it is."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for k, row in enumerate(csv.reader(io.StringIO(data.decode("utf-8"), newline=""))):
        writer.writerow(COLUMNS if k == 0 else row + [""] * (len(COLUMNS) - len(row)))
    return out.getvalue().encode("utf-8")


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
        """Before any work: the directory is writable, a torn last row is set aside, every row parses."""
        self.check_writable()
        with self.lock:
            set_aside_torn_tail(self.csv_path, "its cell is recomputed")
        self.read()

    def check_writable(self) -> None:
        """``results_dir`` is (or can become) a directory this process can write files into."""
        where = f"results_dir={self.root}"
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"{where} is not a directory (a file has that name); pass results_dir= a "
                             "directory path (it is created if missing)")
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

    # ---- rows ---------------------------------------------------------------------------------------------
    def read(self) -> pd.DataFrame:
        """All rows (empty frame with the schema when there is no CSV yet); a torn last row is left out.

        A file that does not parse raises :class:`StoreError` with the line and the fix."""
        try:
            data = self.csv_path.read_bytes()
        except FileNotFoundError:
            return pd.DataFrame(columns=COLUMNS)
        data = data[: data.rfind(b"\n") + 1]  # a row being written (or torn) is not a row yet
        if not data:
            return pd.DataFrame(columns=COLUMNS)
        problem = csv_problem(data)
        if problem is not None:
            line, what = problem
            if line == 1:
                fix = f"put the header back as line 1, exactly: {HEADER}"
            else:
                fix = (f"delete that line (sed -i '{line}d' {self.csv_path}); the cells it held are recomputed on "
                       "the next run")
            raise StoreError(f"{self.csv_path}: line {line} {what}. Fix: {fix}")
        if not data.startswith((HEADER + "\n").encode()):
            data = _with_data_column(data)
        df = pd.read_csv(io.BytesIO(data), dtype={"setting": str, "data": str}, keep_default_na=False,
                         na_values=[""])
        df["data"] = df["data"].fillna("")  # "" = unknown: a row written before rows named their data
        return df

    @staticmethod
    def _done(df: pd.DataFrame, cell: str, config_hash: str, metrics: Iterable[str] | None) -> bool:
        if df.empty:
            return False
        hit = df[(df["cell"] == cell) & (df["config_hash"] == config_hash) & (df["status"] == "ok")]
        if metrics is None:
            return not hit.empty
        return set(metrics) <= set(hit["metric"])

    def is_done(self, cell: str, config_hash: str, metrics: Iterable[str] | None = None) -> bool:
        """Whether ``ok`` rows exist for this cell under this configuration: one per metric of ``metrics`` when
        given, so a cell whose rows were cut short is not done."""
        return self._done(self.read(), cell, config_hash, metrics)

    def append_rows(self, rows: Iterable[dict[str, Any]], cell: str, config_hash: str) -> bool:
        """Append a cell's rows atomically; returns False (and writes nothing) if the cell is already done."""
        rows = list(rows)
        for r in rows:
            unknown = set(r) - set(COLUMNS)
            if unknown:
                raise KeyError(f"unknown result columns {sorted(unknown)}")
            if r.get("status") not in STATUSES:
                raise ValueError(f"status must be one of {STATUSES}, got {r.get('status')!r}")
        make_dirs(self.root)
        with self.lock:
            set_aside_torn_tail(self.csv_path, "its cell is recomputed")
            existing = self.read()
            ok_metrics = {r["metric"] for r in rows if r["status"] == "ok"}
            if ok_metrics and self._done(existing, cell, config_hash, ok_metrics):
                return False
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
            if not self.csv_path.exists() or self.csv_path.stat().st_size == 0:
                writer.writeheader()
            for r in rows:
                writer.writerow({k: r.get(k, "") for k in COLUMNS})
            append_bytes(self.csv_path, buf.getvalue().encode())
        return True

    # ---- per-example records ------------------------------------------------------------------------------
    def records_path(self, cell: str) -> Path:
        return self.records_dir / f"{safe_name(cell)}.jsonl"

    def load_records(self, cell: str, repair: bool = False) -> dict[str, dict[str, Any]]:
        """Finished examples of a cell by example id.

        A line that is not a record (cut short by a kill, not UTF-8, not JSON, no ``id``) is named by file and
        line in a warning and left out, so its example is recomputed; with ``repair`` (a run about to compute
        the cell) it is also moved to a ``.corrupt-<timestamp>`` side file."""
        path = self.records_path(cell)
        if not path.exists():
            return {}
        with self.lock if repair else contextlib.nullcontext():
            lines = path.read_bytes().splitlines(keepends=True)
            out: dict[str, dict[str, Any]] = {}
            bad: list[tuple[int, str]] = []
            for number, line in enumerate(lines, 1):
                rec, why = _record_problem(line)
                if rec is not None:
                    out[rec["id"]] = rec
                elif line.strip():
                    bad.append((number, str(why)))
            if not bad:
                return out
            where = "skipped; the next lengthx run recomputes its example"
            if repair:
                numbers = {n for n, _ in bad}
                side = _save_aside(path, b"".join(x for n, x in enumerate(lines, 1) if n in numbers))
                write_atomic(path, b"".join(x for n, x in enumerate(lines, 1) if n not in numbers))
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


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
