"""Results store (DESIGN §7): tidy CSV rows with provenance, per-example JSONL records, resume, locking.

- ``results.csv``: one row per (cell, metric); a cell is (model, method, task, setting) under one config.
- ``records/<cell>.jsonl``: one line per finished example, appended and flushed as it completes, so an
  interrupted cell continues where it stopped. A record is reused only if its prompt hash still matches.
- Every write happens under a file lock, and a cell's rows are written in one ``O_APPEND`` write after
  checking (under the lock) that no other run has finished the same cell: rerunning never duplicates rows.
"""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import re
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

COLUMNS = [
    "paper", "table", "model", "method", "task", "setting", "metric", "value", "n", "tau", "L_tr", "L_req",
    "L_ex", "seed", "status", "message", "cell", "config_hash", "git_commit", "versions", "device", "seconds",
    "timestamp",
]
STATUSES = ("ok", "oom", "error")


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


@dataclass
class ResultsStore:
    """The results directory of one profile: ``results.csv`` plus ``records/``."""

    root: Path

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.csv_path = self.root / "results.csv"
        self.records_dir = self.root / "records"
        self.lock = FileLock(str(self.root / ".results.lock"))

    # ---- rows ---------------------------------------------------------------------------------
    def read(self) -> pd.DataFrame:
        """All rows (empty frame with the schema when there is no CSV yet)."""
        if not self.csv_path.exists() or self.csv_path.stat().st_size == 0:
            return pd.DataFrame(columns=COLUMNS)
        return pd.read_csv(self.csv_path, dtype={"setting": str}, keep_default_na=False, na_values=[""])

    def is_done(self, cell: str, config_hash: str) -> bool:
        """Whether an ``ok`` row exists for this cell under this configuration."""
        df = self.read()
        if df.empty:
            return False
        hit = df[(df["cell"] == cell) & (df["config_hash"] == config_hash) & (df["status"] == "ok")]
        return not hit.empty

    def append_rows(self, rows: Iterable[dict[str, Any]], cell: str, config_hash: str) -> bool:
        """Append a cell's rows atomically; returns False (and writes nothing) if the cell is already done."""
        rows = list(rows)
        for r in rows:
            unknown = set(r) - set(COLUMNS)
            if unknown:
                raise KeyError(f"unknown result columns {sorted(unknown)}")
            if r.get("status") not in STATUSES:
                raise ValueError(f"status must be one of {STATUSES}, got {r.get('status')!r}")
        self.root.mkdir(parents=True, exist_ok=True)
        with self.lock:
            ok_rows = any(r["status"] == "ok" for r in rows)
            if ok_rows and self.is_done(cell, config_hash):
                return False
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
            new_file = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
            if new_file:
                writer.writeheader()
            for r in rows:
                writer.writerow({k: r.get(k, "") for k in COLUMNS})
            fd = os.open(self.csv_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, buf.getvalue().encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        return True

    # ---- per-example records ---------------------------------------------------------------------
    def records_path(self, cell: str) -> Path:
        return self.records_dir / f"{safe_name(cell)}.jsonl"

    def load_records(self, cell: str) -> dict[str, dict[str, Any]]:
        """Finished examples of a cell by example id (a torn last line from a kill is ignored)."""
        path = self.records_path(cell)
        out: dict[str, dict[str, Any]] = {}
        if not path.exists():
            return out
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                out[rec["id"]] = rec
        return out

    def append_record(self, cell: str, record: dict[str, Any]) -> None:
        """Append one example's record and flush it to disk before returning."""
        self.records_dir.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, ensure_ascii=False) + "\n"
        path = self.records_path(cell)
        with self.lock:
            # a line torn by a kill would glue onto this one: start on a fresh line if needed
            if path.exists() and path.stat().st_size > 0:
                with open(path, "rb") as fh:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        line = "\n" + line
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
