"""``results.csv`` at a lab's size (hundreds of thousands of rows; docs/results.md): read in one pass of pandas'
C parser when every row is sound (:func:`fast_frame`), and parsed once per file version. A sweep asks whether
each of its cells is done, and the tables read the file for every table, so the file would otherwise be parsed
and checked again each time. A parsed frame is kept per path with the file's identity (inode, size,
modification time in nanoseconds); any write lengthx makes changes one of them (an append the size, a rewrite
by rename the inode), and then the file is read again. A records file (``records/<cell>.jsonl``) read without
a repair is kept the same way (:func:`cached_records`): the tables read one cell's records for every table
that shows it."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

_FRAMES: dict[Path, tuple[tuple[int, int, int], Any]] = {}
_RECORDS: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def file_version(path: Path) -> tuple[int, int, int] | None:
    """(inode, size, mtime in ns) of ``path``, or None when it does not exist: as an open of it sees them, not a
    stat. On NFS an open revalidates the file's attributes with the server (close-to-open consistency) while a
    stat may answer from this machine's attribute cache for up to a minute, long enough for rows another machine
    appended to go unseen and their cells to be computed again (docs/results.md, "Many workers, one store")."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return st.st_ino, st.st_size, st.st_mtime_ns


def cached_frame(path: Path, version: tuple[int, int, int] | None) -> Any | None:
    """A copy of the frame kept for ``path`` at ``version``, or None."""
    kept = _FRAMES.get(path)
    if version is None or kept is None or kept[0] != version:
        return None
    return kept[1].copy()


def keep_frame(path: Path, version: tuple[int, int, int] | None, frame: Any) -> None:
    """Keep ``frame`` (a copy) as what ``path`` holds at ``version``."""
    if version is not None:
        _FRAMES[path] = (version, frame.copy())


def cached_records(path: Path, version: tuple[int, int, int] | None) -> dict[str, Any] | None:
    """The records (by example id) kept for ``path`` at ``version`` (a new dict of the same records), or None."""
    kept = _RECORDS.get(path)
    if version is None or kept is None or kept[0] != version:
        return None
    return dict(kept[1])


def keep_records(path: Path, version: tuple[int, int, int] | None, records: dict[str, Any]) -> None:
    """Keep ``records`` (every line of the file was a sound record) as what ``path`` holds at ``version``."""
    if version is not None:
        _RECORDS[path] = (version, dict(records))


# what Python's float() may read that pandas' to_numeric does not
PYTHON_FLOAT = r"\s*[+-]?(nan|inf|infinity|[0-9_]*\.?[0-9_]*(e[+-]?[0-9_]+)?)\s*"


def fast_frame(text: str, text_columns: tuple[str, ...], statuses: tuple[str, ...],
               row_problem: Callable[[dict[str, str]], str | None]) -> pd.DataFrame | None:
    """The rows of a ``results.csv`` text in the current schema (it parses: ``csv_problem`` found nothing) read in
    one pass of pandas' C parser, or None when a row may not be a result: the caller then reads it row by row,
    naming each bad row by its line. A row is suspected by vectorized checks wider than ``row_problem`` (status,
    an ``ok`` row's cell, hash, metric, value, ``n`` and τ), and only the suspected rows are checked exactly."""
    df = pd.read_csv(io.StringIO(text), dtype=dict.fromkeys(text_columns, str), keep_default_na=False,
                     na_values=[""])
    if df.empty:
        return df
    value, n = df["value"], df["n"]
    if not (pd.api.types.is_numeric_dtype(value) and pd.api.types.is_numeric_dtype(n)):
        return None  # a value or count that is text: some row is not a result
    status = df["status"].fillna("")
    ok = status == "ok"
    finite_value = np.isfinite(value.to_numpy(dtype=float))
    counts = n.to_numpy(dtype=float)
    whole = np.isfinite(counts) & (counts >= 0) & (counts == np.floor(np.nan_to_num(counts)))
    tau_text = df["tau"]
    tau = pd.to_numeric(tau_text, errors="coerce").to_numpy(dtype=float)
    number = np.isfinite(tau) | np.isinf(tau)
    if not pd.api.types.is_numeric_dtype(tau_text):  # labels (logn) and per-layer lists are not numbers; text
        # Python reads as one (nan, 1_0, " 2") is checked exactly
        number |= tau_text.str.fullmatch(PYTHON_FLOAT, case=False).fillna(False).to_numpy(dtype=bool)
    odd_tau = number & ~(np.isfinite(tau) & (tau > 0))
    suspect = (~status.isin(statuses)).to_numpy() | (~ok.to_numpy() & np.isinf(value.to_numpy(dtype=float)))
    suspect |= ok.to_numpy() & (df[["cell", "config_hash", "metric"]].isna().any(axis=1).to_numpy()
                                | ~finite_value | ~whole | odd_tau)
    for k in np.flatnonzero(suspect):
        row = {c: "" if pd.isna(v) else str(v) for c, v in df.iloc[k].items()}
        if row_problem(row) is not None:
            return None
    return df
