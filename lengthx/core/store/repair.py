"""Repairs of a results directory, made under its store's lock (docs/design.md §7, docs/results.md): a line cut
short by a kill, rows that cannot be results, and records lines that are not records move to a
``<file>.corrupt-<timestamp>`` side file (their cell or example is recomputed); a recomputed cell's rows replace
its old ones; a ``results.csv`` with the older header gains the ``data`` column. Each rewrite is written beside
the file and renamed (:func:`lengthx.core.store.files.write_atomic`).
"""

from __future__ import annotations

import csv
import io
import logging
import os
from pathlib import Path

from lengthx.core.store.files import refuse_link, save_aside, write_atomic, write_error
from lengthx.core.store.schema import COLUMNS, LEGACY_COLUMNS, with_data_column

log = logging.getLogger("lengthx")


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
    side = save_aside(path, data[cut:])
    try:
        os.truncate(path, cut)
    except OSError as err:
        raise write_error(path, err) from err
    log.warning("%s: line %d was cut short by an interrupted write; moved it to %s (%s)", path,
                data.count(b"\n", 0, cut) + 1, side, consequence)
    return side


def set_aside_rows(csv_path: Path, text: str, bad: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Move the rows ``bad`` names (:func:`lengthx.core.store.schema.parse_rows`) of ``text``, the content of
    ``csv_path``, to a side file and rewrite ``csv_path`` without them; returns ``bad`` with the side file named."""
    reader = csv.reader(io.StringIO(text, newline=""))
    lines = text.splitlines(keepends=True)
    spans, start = [], 0
    for _ in reader:
        spans.append((start, reader.line_num))
        start = reader.line_num
    bad_rows = {k + 1 for k, _, _ in bad}  # +1: the header is record 0
    keep = [ln for k, (a, b) in enumerate(spans) if k not in bad_rows for ln in lines[a:b]]
    drop = [ln for k, (a, b) in enumerate(spans) if k in bad_rows for ln in lines[a:b]]
    side = save_aside(csv_path, "".join(drop).encode("utf-8"))
    write_atomic(csv_path, "".join(keep).encode("utf-8"))
    return [(k, line, f"{why} (moved to {side})") for k, line, why in bad]


def set_aside_lines(path: Path, lines: list[bytes], numbers: set[int]) -> Path:
    """Move the lines ``numbers`` (from 1) of ``lines``, the content of ``path``, to a side file and rewrite
    ``path`` without them; returns the side file."""
    side = save_aside(path, b"".join(x for n, x in enumerate(lines, 1) if n in numbers))
    write_atomic(path, b"".join(x for n, x in enumerate(lines, 1) if n not in numbers))
    return side


def upgrade_header(csv_path: Path) -> None:
    """Rewrite a results file with the :data:`~lengthx.core.store.schema.LEGACY_COLUMNS` header in the current
    schema, so that every row has every column and ``pandas.read_csv`` reads it."""
    try:
        with open(csv_path, "rb") as fh:
            first = fh.readline()
    except FileNotFoundError:
        return
    if first.rstrip(b"\r\n").decode("utf-8", "replace") == ",".join(LEGACY_COLUMNS):
        write_atomic(csv_path, with_data_column(csv_path.read_bytes()))
        log.info("%s: the header gained the data column (rows written before it have it empty)", csv_path)


def replace_rows(csv_path: Path, cell: str, config_hash: str, new_rows: str) -> None:
    """``results.csv`` without the ``ok`` rows of ``cell`` under ``config_hash``, plus ``new_rows``: written beside
    it and renamed."""
    text = csv_path.read_text(encoding="utf-8")
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
    write_atomic(csv_path, ("".join(keep) + new_rows).encode("utf-8"))
    log.info("%s: the rows of %s under %s were replaced by its recomputed ones", csv_path, cell, config_hash)
