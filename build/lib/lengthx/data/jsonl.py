"""Reading the benchmarks' JSON-lines files (LCC, LongEval, Lost in the Middle): every line checked against
the fields a task needs, a bad line named by file and line number.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class DataFormatError(ValueError):
    """A data file does not have the benchmark's fields; the message names the file, line and field."""


def open_text(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file, transparently gunzipping ``*.gz``."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        yield from enumerate(fh, start=1)


def read_jsonl(path: str | Path, required: dict[str, type | tuple[type, ...]]) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file, each checked for the ``required`` fields and their types.

    Blank lines are skipped. Raises :class:`DataFormatError` ``"<file>, line <n>: missing field 'x'"`` (or
    invalid JSON, or a wrong type) at the first bad line, and ``FileNotFoundError`` naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    rows = []
    for lineno, line in open_text(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFormatError(f"{path}, line {lineno}: invalid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise DataFormatError(f"{path}, line {lineno}: expected a JSON object, got {type(row).__name__}")
        for name, kind in required.items():
            if name not in row:
                raise DataFormatError(f"{path}, line {lineno}: missing field {name!r}")
            if not isinstance(row[name], kind):
                raise DataFormatError(f"{path}, line {lineno}: field {name!r} should be "
                                      f"{getattr(kind, '__name__', kind)}, got {type(row[name]).__name__}")
        row["_line"] = lineno
        rows.append(row)
    return rows
