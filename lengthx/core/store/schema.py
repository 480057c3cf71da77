"""What a ``results.csv`` row and a ``records/<cell>.jsonl`` line are (docs/design.md §7, docs/results.md): the
columns, the statuses, and the checks a row or record passes before it is read or written. A row that cannot be a
result (:func:`row_problem`) or a line that is not a record (:func:`record_problem`) is named and left out by the
reader (:class:`lengthx.core.store.ResultsStore`); a file that does not parse at all (:func:`csv_problem`) stops it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from typing import Any

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


def missing(value: Any) -> bool:
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


def record_problem(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
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


def csv_text(rows: list[list[str]]) -> str:
    """Rows as ``results.csv`` text, as lengthx writes it (minimal quoting, ``\\n`` line ends)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def with_data_column(data: bytes) -> bytes:
    """A results file with the :data:`LEGACY_COLUMNS` header in the current schema: the header gains ``data`` and
    every row without it an empty field."""
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    return csv_text([COLUMNS] + [row + [""] * (len(COLUMNS) - len(row)) for row in rows[1:]]).encode("utf-8")
