"""Which row of each cell the tables and the summary show (docs/results.md, "Current rows"): of the newest
configuration of a cell, its largest finished run; rows are newest last, in the order ``results.csv`` holds them.
"""

from __future__ import annotations

import logging
import weakref

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
    ok = df[df["status"] == "ok"].copy()
    ok["value"] = pd.to_numeric(ok["value"], errors="coerce")
    warn_future_rows(ok)
    if "config_hash" in ok.columns:
        newest = ok.drop_duplicates(CELL_KEY, keep="last")[[*CELL_KEY, "config_hash"]]
        ok = ok.merge(newest, on=[*CELL_KEY, "config_hash"], how="inner", sort=False)
    if "n" in ok.columns:
        ok = ok.assign(_n=pd.to_numeric(ok["n"], errors="coerce").fillna(-1))
        ok = ok.sort_values("_n", kind="stable").drop(columns="_n")
    return ok.drop_duplicates(CELL_KEY, keep="last")


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
