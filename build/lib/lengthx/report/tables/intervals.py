"""95% confidence intervals of table cells from their per-example records (docs/results.md).

A cell's value is the mean of a per-example score over its examples (Table 3: "average perplexity of N
sequences"; Tables 6, 12, 13: exact match and edit similarity). Two intervals are drawn from the records
committed beside ``results.csv``:

- :func:`bootstrap_mean_ci`: the percentile bootstrap of the mean over examples;
- :func:`paired_difference_ci`: a method's paired difference to τ = 1 (method ``none``) on the same
  example ids, the percentile bootstrap of the mean difference. With the same examples at every method
  (and, in the mini profile, the same text at every length) this is the interval that says whether a
  temperature helps.

Only records written under the row's own ``config_hash`` count, so an interval always belongs to the value
beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lengthx.core.store import ResultsStore

LEVEL = 0.95


N_BOOT = 2000


def bootstrap_mean_ci(values: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT,
                      seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values`` (resampling examples with replacement)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("a bootstrap interval needs at least one value")
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))
    means = x[idx].mean(axis=1)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def paired_difference_ci(a: Sequence[float], b: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT,
                         seed: int = 0) -> tuple[float, float, float]:
    """(mean of a − b, lower, upper): the paired difference of two scores on the same examples."""
    if len(a) != len(b):
        raise ValueError(f"paired scores need the same examples, got {len(a)} and {len(b)}")
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    lo, hi = bootstrap_mean_ci(d, level, n_boot, seed)
    return float(d.mean()), lo, hi


@dataclass(frozen=True)
class CellInterval:
    """The interval of one cell, and its paired difference to τ = 1 when both cells have records."""

    n: int
    low: float
    high: float
    delta: float | None = None
    delta_low: float | None = None
    delta_high: float | None = None


Key = tuple[str, str, str, str, str]  # (model, method, task, setting, metric)


def cell_scores(store: ResultsStore, row: pd.Series | object, metric: str) -> dict[str, float]:
    """Per-example ``metric`` of the cell of ``row`` (an ``ok`` results row), by example id."""
    records = store.load_records(str(row.cell))
    return {i: float(r["scores"][metric]) for i, r in records.items()
            if r.get("config_hash") == row.config_hash and metric in r.get("scores", {})}


def table_intervals(store: ResultsStore, ok: pd.DataFrame, tasks: set[str], metrics: set[str]) -> dict[Key, CellInterval]:
    """Intervals of every latest-``ok`` cell of ``tasks`` × ``metrics`` whose records are all present.

    A cell whose records are missing or fewer than its row's ``n`` gets no interval (never a partial one).
    """
    rows = ok[ok["task"].isin(tasks) & ok["metric"].isin(metrics)]
    scores: dict[Key, dict[str, float]] = {}
    for r in rows.itertuples():
        got = cell_scores(store, r, r.metric)
        if got and len(got) == int(r.n):
            scores[(r.model, r.method, r.task, str(r.setting), r.metric)] = got
    out: dict[Key, CellInterval] = {}
    for key, got in scores.items():
        lo, hi = bootstrap_mean_ci(list(got.values()))
        base = scores.get((key[0], "none", *key[2:]))
        if key[1] != "none" and base is not None and set(base) == set(got):
            ids = sorted(got)
            delta, dlo, dhi = paired_difference_ci([got[i] for i in ids], [base[i] for i in ids])
            out[key] = CellInterval(len(got), lo, hi, delta, dlo, dhi)
        else:
            out[key] = CellInterval(len(got), lo, hi)
    return out
