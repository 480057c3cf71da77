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
- Every write is checked: an append is written in full and fsynced, or the file is cut back to where it was
  and :class:`StoreError` names it (a full disk never leaves half a row); a file that replaces another
  (caches, a header that grows, tables) is written beside it and renamed. No write follows a symbolic link.
- A line cut short by a kill, a records line that is not a record (no id, no finite scores), a row whose value is
  not a finite number, or a cache whose τ is out of range, is moved to a ``<file>.corrupt-<timestamp>`` side file
  with a warning naming the file and line, and its cell (or example) is recomputed: a cell is done only when all
  its rows are present. A ``results.csv`` that does not parse stops every reader with the file, the line and the
  fix.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import logging
import math
import os
import platform
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

from lengthx.core.store_cache import cached_frame, fast_frame, file_version, keep_frame
from lengthx.core.store_duplicates import conflicting_lines
from lengthx.errors import UserError

log = logging.getLogger("lengthx")

COLUMNS = [
    "paper", "table", "model", "method", "task", "setting", "metric", "value", "n", "tau", "L_tr", "L_req",
    "L_ex", "seed", "status", "message", "cell", "config_hash", "git_commit", "versions", "device", "seconds",
    "timestamp", "data",
]
HEADER = ",".join(COLUMNS)
NUMERIC_COLUMNS = ("value", "n", "tau", "L_tr", "L_req", "L_ex", "seed", "seconds")
# every other column is text, read as text: a commit such as 8559e63 or a hash of digits only is an identity,
# never a number (pandas would read 8559e63 as 8.559e+66 and 0123 as 123)
TEXT_COLUMNS = tuple(c for c in COLUMNS if c not in NUMERIC_COLUMNS)
# results.csv files written before rows named their data (the last column): read with ``data`` empty (unknown);
# the next append rewrites the file (atomically) with the current header, every older row gaining an empty field
LEGACY_COLUMNS = COLUMNS[:-1]
STATUSES = ("ok", "oom", "error")
# the ``message`` of an ok row whose Algorithm 1 τ is its grid's end without reaching S̄_tr(1): tables mark its τ
# with UNALIGNED_MARK (docs/results.md)
SHORT_OF_TARGET = "Algorithm 1 stopped at its grid's end short of S̄_tr(1)"
UNALIGNED_MARK = "*"
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark, as editors and spreadsheets may put before the header


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
    if err.errno == errno.ELOOP:
        return _link_error(path)
    if err.errno == errno.EFBIG:
        return StoreError(f"{path}: could not write it ({err.strerror or err}: a file size limit, ulimit -f); "
                          "nothing partial was kept. Raise the limit and rerun the same command")
    return StoreError(f"{path}: could not write it ({err.strerror or err}); nothing partial was kept. Free disk "
                      "space (or make the directory writable) and rerun the same command")


def _link_error(path: Path) -> StoreError:
    try:
        target = f" to {os.readlink(path)}"
    except OSError:
        target = ""
    return StoreError(f"{path} is a symbolic link{target}: lengthx never writes through a link (it could lead "
                      "out of the results directory). Fix: delete the link (the file is recreated), or copy the "
                      "file it points to in its place")


def refuse_link(path: Path) -> None:
    """Raise :class:`StoreError` when ``path`` is a symbolic link (a file lengthx writes or repairs)."""
    if os.path.islink(path):
        raise _link_error(path)


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
    :class:`StoreError` (the caller holds the store's lock). A symbolic link at ``path`` is refused."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
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
    """Replace ``path`` by ``data``: a temporary file beside it, written in full and fsynced, then renamed. A
    symbolic link at ``path`` is refused (it is never followed, nor silently replaced)."""
    path = Path(path)
    refuse_link(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            _write_fully(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, IsADirectoryError) or path.is_dir():
            raise StoreError(f"{path} is a directory, where lengthx writes a file; move it away (or pass another "
                             "output directory)") from err
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
    refuse_link(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size == 0 or not path.is_file():
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
    if data.startswith(BOM):
        return 1, ("starts with a UTF-8 byte-order mark (BOM, the bytes EF BB BF an editor or spreadsheet adds "
                   "when it saves a file) before the header")
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


def _finite(value: Any) -> bool:
    """A number that is neither NaN nor infinite (a bool is not a score)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(text: str) -> float | None:
    """``text`` as a finite number, or None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _missing(value: Any) -> bool:
    """None, or a float NaN as pandas has it for an empty field (written as an empty field, never as "nan")."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def row_problem(row: dict[str, str]) -> str | None:
    """Why a ``results.csv`` row (its fields as text) cannot be a result, or None: an unknown status, an ``ok``
    row without a finite value, a non-negative whole ``n`` or its cell and hash, or a τ that is a number but
    not a finite positive one."""
    status = row.get("status", "")
    if status not in STATUSES:
        return f"has status {status!r}, not one of {', '.join(STATUSES)}"
    if status != "ok":
        value = row.get("value", "")
        try:
            finite = value == "" or math.isfinite(float(value))
        except ValueError:
            finite = False
        return None if finite else f"has value {value!r}, neither empty nor a finite number"
    for key in ("cell", "config_hash", "metric"):
        if not row.get(key):
            return f"is an ok row without {key}"
    value, n = _number(row.get("value", "")), _number(row.get("n", ""))
    if value is None:
        return f"has value {row.get('value')!r}, not a finite number"
    if n is None or n < 0 or n != int(n):
        return f"has n {row.get('n')!r}, not a count"
    tau = row.get("tau", "")
    with contextlib.suppress(ValueError):  # a per-row rule's label or per-layer τ list is text
        t = float(tau)
        if not (math.isfinite(t) and t > 0):
            return f"has tau {tau}, not a finite temperature above 0"
    return None


def parse_rows(text: str) -> tuple[list[list[str]], list[tuple[int, int, str]]]:
    """The data rows of a ``results.csv`` text (after its header), and each bad one as (index in the rows, line
    number, why) (:func:`row_problem`). The text parses (:func:`csv_problem` is None)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    rows, bad, line = [], [], 1
    header = next(reader, None)
    line = reader.line_num + 1
    for row in reader:
        fields = dict(zip(header or COLUMNS, row, strict=False))
        why = row_problem(fields)
        if why is not None:
            bad.append((len(rows), line, why))
        rows.append(row)
        line = reader.line_num + 1
    return rows, bad


def _record_problem(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) for a records line that is a JSON object with a string ``id`` and ``scores`` of finite
    numbers, else (None, why)."""
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
    scores = rec.get("scores")
    if not isinstance(scores, dict) or not scores:
        return None, 'is not a record (no "scores")'
    for name, value in scores.items():
        if not _finite(value):
            return None, f"has score {name}={value!r}, not a finite number"
    return rec, None


def temperature_problem(tau: Any, low: float = 0.0, high: float = 1.0) -> str | None:
    """Why a cached τ cannot be one (not a finite number in (``low``, ``high``], or a per-layer list with one
    such entry), or None."""
    values = tau if isinstance(tau, list) and tau else [tau]
    for t in values:
        if not _finite(t) or not low < t <= high:
            return f"has tau={json.dumps(tau)[:60]}, not a finite temperature in ({low:g}, {high:g}]"
    return None


def read_json(path: Path, required: tuple[str, ...] = (),
              check: Callable[[dict[str, Any]], str | None] | None = None) -> dict[str, Any] | None:
    """A JSON cache file as a dict, or None when it is absent or damaged.

    A damaged one (not UTF-8 JSON, not an object, without a ``required`` key, or one ``check`` finds a problem
    with) is moved to a side file with a warning naming both and the problem, so the caller recomputes it
    instead of failing on every rerun. A symbolic link is refused."""
    refuse_link(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(data.decode("utf-8"))
        missing = [k for k in required if k not in obj] if isinstance(obj, dict) else []
        why = "is not a JSON object" if not isinstance(obj, dict) else f"has no {missing[0]!r}" if missing else None
        if why is None and check is not None:
            why = check(obj)
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


def csv_text(rows: list[list[str]]) -> str:
    """Rows as ``results.csv`` text, as lengthx writes it (minimal quoting, ``\\n`` line ends)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _with_data_column(data: bytes) -> bytes:
    """A results file with the :data:`LEGACY_COLUMNS` header in the current schema: the header gains ``data`` and
    every row without it an empty field."""
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    return csv_text([COLUMNS] + [row + [""] * (len(COLUMNS) - len(row)) for row in rows[1:]]).encode("utf-8")


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

    def check_inside(self, path: Path) -> None:
        """Raise :class:`StoreError` when ``path`` is a symbolic link (a file), or leads out of the results
        directory (a folder)."""
        if not os.path.islink(path):
            return
        if path.suffix or not path.resolve().is_dir() or not path.resolve().is_relative_to(self.root.resolve()):
            raise _link_error(path)

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
                return fast
        rows, bad = parse_rows(text)
        if bad:
            bad = self._set_aside_rows(text, bad) if repair else bad
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
        return df

    def _set_aside_rows(self, text: str, bad: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
        """Move the rows ``bad`` names to a side file and rewrite ``results.csv`` without them (atomically)."""
        reader = csv.reader(io.StringIO(text, newline=""))
        lines = text.splitlines(keepends=True)
        spans, start = [], 0
        for _ in reader:
            spans.append((start, reader.line_num))
            start = reader.line_num
        bad_rows = {k + 1 for k, _, _ in bad}  # +1: the header is record 0
        keep = [ln for k, (a, b) in enumerate(spans) if k not in bad_rows for ln in lines[a:b]]
        drop = [ln for k, (a, b) in enumerate(spans) if k in bad_rows for ln in lines[a:b]]
        side = _save_aside(self.csv_path, "".join(drop).encode("utf-8"))
        write_atomic(self.csv_path, "".join(keep).encode("utf-8"))
        return [(k, line, f"{why} (moved to {side})") for k, line, why in bad]

    @staticmethod
    def _done(df: pd.DataFrame, cell: str, config_hash: str, metrics: Iterable[str] | None, n: int | None) -> bool:
        if df.empty:
            return False
        hit = df[(df["cell"] == cell) & (df["config_hash"] == config_hash) & (df["status"] == "ok")]
        if n is not None:
            hit = hit[pd.to_numeric(hit["n"], errors="coerce") >= n]
        if metrics is None:
            return not hit.empty
        return set(metrics) <= set(hit["metric"])

    def is_done(self, cell: str, config_hash: str, metrics: Iterable[str] | None = None, n: int | None = None) -> bool:
        """Whether ``ok`` rows exist for this cell under this configuration: one per metric of ``metrics`` when
        given, so a cell whose rows were cut short is not done; with ``n``, rows of at least ``n`` examples (a
        finished larger run counts: its first ``n`` examples are the ones asked for)."""
        return self._done(self.read(), cell, config_hash, metrics, n)

    def append_rows(self, rows: Iterable[dict[str, Any]], cell: str, config_hash: str) -> bool:
        """Write a cell's rows atomically; returns False (and writes nothing) if the cell is already done with at
        least as many examples as the new rows hold. ``ok`` rows left under the same cell and hash (a cell whose
        other rows were torn off, or a smaller run) are replaced, never kept beside the new ones."""
        rows = [{k: "" if k != "value" and _missing(v) else v for k, v in r.items()} for r in rows]
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
            if ok_metrics and self._done(existing, cell, config_hash, ok_metrics, n):
                return False
            self._upgrade_header()
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
                self._replace_rows(cell, config_hash, buf.getvalue())
            else:
                append_bytes(self.csv_path, buf.getvalue().encode())
        return True

    def _upgrade_header(self) -> None:
        """Rewrite a results file with the :data:`LEGACY_COLUMNS` header in the current schema (atomically), so
        that every row has every column and ``pandas.read_csv`` reads it."""
        try:
            with open(self.csv_path, "rb") as fh:
                first = fh.readline()
        except FileNotFoundError:
            return
        if first.rstrip(b"\r\n").decode("utf-8", "replace") == ",".join(LEGACY_COLUMNS):
            write_atomic(self.csv_path, _with_data_column(self.csv_path.read_bytes()))
            log.info("%s: the header gained the data column (rows written before it have it empty)", self.csv_path)

    def _replace_rows(self, cell: str, config_hash: str, new_rows: str) -> None:
        """``results.csv`` without the ``ok`` rows of ``cell`` under ``config_hash``, plus ``new_rows``: written
        beside it and renamed (the caller holds the lock)."""
        text = self.csv_path.read_text(encoding="utf-8")
        reader = csv.reader(io.StringIO(text, newline=""))
        lines = text.splitlines(keepends=True)
        keep, start = [], 0
        cols = {c: k for k, c in enumerate(COLUMNS)}
        for row in reader:
            span = lines[start:reader.line_num]
            start = reader.line_num
            if (reader.line_num > 1 and len(row) > cols["config_hash"] and row[cols["cell"]] == cell
                    and row[cols["config_hash"]] == config_hash and row[cols["status"]] == "ok"):
                continue
            keep += span
        write_atomic(self.csv_path, ("".join(keep) + new_rows).encode("utf-8"))
        log.info("%s: the rows of %s under %s were replaced by its recomputed ones", self.csv_path, cell, config_hash)

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

    def load_records(self, cell: str, repair: bool = False) -> dict[str, dict[str, Any]]:
        """Finished examples of a cell by example id, in the order they were first written (for an id recomputed
        under another configuration, its last record; two records of one id under one configuration are a
        conflict, :mod:`lengthx.core.store_duplicates`, named and left out like a bad line).

        A line that is not a record (cut short by a kill, not UTF-8, not JSON, no ``id``, no finite ``scores``) is
        named by file and line in a warning and left out, so its example is recomputed; with ``repair`` (a run
        about to compute the cell) it is also moved to a ``.corrupt-<timestamp>`` side file. A records file that
        is a symbolic link is refused."""
        path = self.records_path(cell)
        refuse_link(path)
        if not path.exists():
            return {}
        with self.lock if repair else contextlib.nullcontext():
            lines = path.read_bytes().splitlines(keepends=True)
            parsed: list[tuple[int, dict[str, Any]]] = []
            bad: list[tuple[int, str]] = []
            for number, line in enumerate(lines, 1):
                rec, why = _record_problem(line)
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


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
