"""Which row of each cell the tables and the summary show (docs/results.md, "Current rows"): of the newest
configuration of a cell, its largest finished run; rows are newest last, in the order ``results.csv`` holds them.
"""

from __future__ import annotations

import logging
import weakref

import numpy as np
import pandas as pd

log = logging.getLogger("lengthx")

CELL_KEY = ["model", "method", "task", "setting", "metric"]


def latest_ok(df: pd.DataFrame) -> pd.DataFrame:
    """One ``ok`` row per (model, method, task, setting, metric): of the newest configuration (``config_hash``)
    of that cell, its largest finished run (most examples, ``n``; the newest of equals). A later, smaller run of
    the same cell never hides a larger one: its examples are the first of the larger run's.

    "Newest" is the order rows were appended to ``results.csv`` (a recomputed cell's rows move to its end,
    docs/results.md), the order of ``df``, never the ``timestamp`` column: a row written on a machine whose
    clock ran ahead does not win over every later one. Rows dated in the future are named in a warning.

    The answer for a frame is kept while the frame lives (every table of ``lengthx tables`` asks it of the same
    rows); each call gets a copy of its own."""
    if df.empty:
        return df
    kept = _LATEST.get(id(df))
    if kept is not None and kept[0]() is df and kept[1] == df.shape:
        return kept[2].copy()
    out, key = _latest_ok(df), id(df)
    try:
        _LATEST[key] = (weakref.ref(df, lambda _: _LATEST.pop(key, None)), df.shape, out.copy())
    except TypeError:  # a frame that cannot be referenced weakly is not kept
        pass
    return out


_LATEST: dict[int, tuple[weakref.ref, tuple[int, int], pd.DataFrame]] = {}


def _latest_ok(df: pd.DataFrame) -> pd.DataFrame:
    """The rows :func:`latest_ok` keeps, in the order of their ``n`` (then of ``df``), found on the key columns
    alone and taken from ``df`` once: at a lab's ~10^5 cells every filter of the whole frame costs a copy of
    every column."""
    ok = np.flatnonzero((df["status"] == "ok").to_numpy(dtype=bool, na_value=False))
    if "timestamp" in df.columns:
        warn_future_rows(df[[c for c in ("timestamp", "cell") if c in df.columns]].iloc[ok])
    key = df[CELL_KEY].iloc[ok].groupby(CELL_KEY, sort=False, dropna=False).ngroup().to_numpy() if len(ok) else ok
    keep = np.ones(len(ok), dtype=bool)
    if "config_hash" in df.columns:  # the newest configuration of each cell: the one of its last ok row
        config = pd.factorize(df["config_hash"].iloc[ok], use_na_sentinel=False)[0]
        last = np.full(key.max() + 1 if len(key) else 0, -1)
        np.maximum.at(last, key, np.arange(len(key)))  # each key's last ok row (unbuffered: defined for repeats)
        keep = config == config[last][key]
    n = (pd.to_numeric(df["n"].iloc[ok], errors="coerce").fillna(-1).to_numpy(dtype=float) if "n" in df.columns
         else np.zeros(len(ok)))
    rows, key, n = ok[keep], key[keep], n[keep]
    # the largest n of each key, the newest of equals: the last of its key in (key, n, position) order
    by = np.lexsort((rows, n, key))
    last = np.ones(len(by), dtype=bool)
    last[:-1] = key[by][1:] != key[by][:-1]
    chosen = by[last]
    chosen = chosen[np.lexsort((rows[chosen], n[chosen]))]  # the order of n, then of the file
    out = df.iloc[rows[chosen]].reset_index(drop=True)
    out["value"] = pd.to_numeric(out["value"], errors="coerce")
    return out


FUTURE_SLACK_S = 86400  # a row dated more than a day ahead of this machine's clock is "in the future" (time zones)
_WARNED: set[tuple[int, str]] = set()


def warn_future_rows(rows: pd.DataFrame) -> None:
    """Warn once, naming the count, the latest date and a cell, when ``rows`` hold timestamps in the future."""
    if "timestamp" not in rows.columns or rows.empty:
        return
    import time

    limit = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + FUTURE_SLACK_S))
    stamps = rows["timestamp"].astype(str)
    ahead = rows[stamps > limit]
    if ahead.empty:
        return
    latest = str(ahead["timestamp"].max())
    if (len(ahead), latest) in _WARNED:
        return
    _WARNED.add((len(ahead), latest))
    log.warning("lengthx: %d row(s) of results.csv are dated in the future (up to %s; e.g. %s): the clock of the "
                "machine that wrote them ran ahead. Tables take the newest row by the order rows were written, "
                "not by their dates", len(ahead), latest, ahead["cell"].iloc[0] if "cell" in ahead else "?")
