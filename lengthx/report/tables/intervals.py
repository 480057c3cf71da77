"""95% confidence intervals of table cells from their per-example records (docs/results.md).

A cell's value is the mean of a per-example score over its examples (Table 3: "average perplexity of N
sequences"; Tables 6, 12, 13: exact match and edit similarity). Two intervals are drawn from the records
committed beside ``results.csv``:

- :func:`bootstrap_mean_ci`: the percentile bootstrap of the mean over examples;
- :func:`paired_difference_ci`: a method's paired difference to τ = 1 (method ``none``; paper B's tables:
  OOTB) on the same example ids, the percentile bootstrap of the mean difference. With the same examples at every method
  (and, in the mini profile, the same text at every length) this is the interval that says whether a
  temperature helps.

Scores that are right or wrong per example (retrieval and QA accuracy: 0 or 100) get score intervals
instead, since a bootstrap of 10 all-correct examples is the empty interval [100, 100]: the Wilson score
interval for a cell (:func:`wilson_ci`) and Newcombe's hybrid score interval for a paired difference of
proportions (:func:`newcombe_paired_ci`; Newcombe 1998, "Improved confidence intervals for the difference
between binomial proportions based on paired data", method 10).

Only records written under the row's own ``config_hash`` count, the first ``n`` of them (the row's count), so an
interval always belongs to the value beside it.

A table's intervals are kept in ``<results>/.cache/intervals/<fingerprint>.json``, named by a fingerprint of
everything they are drawn from (each cell's row, its records file's version, the baseline, and the source of this
module and of the store's choice of a cell's records), so the next command that shows the same cells reads them
instead of parsing every records file and resampling again; any change to a records file, a row or this code is a
new fingerprint.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

from lengthx.core.frames import rows as frame_rows
from lengthx.core.store import ResultsStore, StoreError, file_version, first_records, read_json, write_json

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


def wilson_ci(successes: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of a proportion: the p whose score test ``|p̂ − p| / sqrt(p(1 − p)/n) ≤ z``
    does not reject."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"a proportion needs 0 <= successes <= n and n > 0, got {successes} of {n}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def newcombe_paired_ci(a: Sequence[bool], b: Sequence[bool], level: float = LEVEL) -> tuple[float, float, float]:
    """(p_a − p_b, lower, upper) for paired right/wrong outcomes: Newcombe's method 10, which combines the
    Wilson intervals of both proportions with the phi correlation of the pairs (0 when a margin is empty),
    as Fagerland, Lydersen and Laake (2014) state it."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired outcomes need the same, non-empty examples, got {len(a)} and {len(b)}")
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    n = x.size
    both, only_a, only_b = int((x & y).sum()), int((x & ~y).sum()), int((~x & y).sum())
    neither = n - both - only_a - only_b
    p1, p2 = x.mean(), y.mean()
    l1, u1 = wilson_ci(int(x.sum()), n, level)
    l2, u2 = wilson_ci(int(y.sum()), n, level)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    phi = 0.0 if margins == 0 else (both * neither - only_a * only_b) / np.sqrt(margins)
    delta = np.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    epsilon = np.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    diff = float(p1 - p2)
    return diff, float(max(-1.0, diff - delta)), float(min(1.0, diff + epsilon))


@dataclass(frozen=True)
class CellInterval:
    """The interval of one cell, and its paired difference to τ = 1 when both cells have records."""

    n: int
    low: float
    high: float
    delta: float | None = None
    delta_low: float | None = None
    delta_high: float | None = None
    kind: str = "bootstrap"  # "score": Wilson (cell) and Newcombe (difference), the scores being right or wrong


Key = tuple[str, str, str, str, str]  # (model, method, task, setting, metric)


def cell_scores(store: ResultsStore, row: pd.Series | object, metric: str) -> dict[str, float]:
    """Per-example ``metric`` of the cell of ``row`` (an ``ok`` results row), by example id: the first ``n`` (the
    row's count) of the records written under the row's hash, the examples its value averages."""
    records = {i: r for i, r in store.load_records(str(row.cell)).items()
               if r.get("config_hash") == row.config_hash and metric in r.get("scores", {})}
    n = getattr(row, "n", None)
    if n is not None and pd.notna(n):
        records = first_records(records, int(n))
    return {i: float(r["scores"][metric]) for i, r in records.items()}


def table_intervals(store: ResultsStore, ok: pd.DataFrame, tasks: set[str], metrics: set[str],
                    baseline: str = "none") -> dict[Key, CellInterval]:
    """Intervals of every latest-``ok`` cell of ``tasks`` × ``metrics`` whose records are all present, each
    with its paired difference to the ``baseline`` method's cell of the same model and setting (τ = 1 by
    default; paper B: OOTB) when both scored the same examples.

    A cell whose records are missing or fewer than its row's ``n`` gets no interval (never a partial one).
    """
    rows = ok[ok["task"].isin(tasks) & ok["metric"].isin(metrics)]
    on_disk = store.records_files()  # one listing: a cell with no records file has no interval, unread
    listed = [r for r in frame_rows(rows, ["model", "method", "task", "setting", "metric", "cell", "config_hash", "n"])
              if store.records_name(str(r.cell)) in on_disk]
    if not listed:
        return {}
    sources = [[str(v) for v in r] + [list(file_version(store.records_path(str(r.cell))) or ())] for r in listed]
    fingerprint = hashlib.sha256(json.dumps([baseline, N_BOOT, LEVEL, _SOURCE, sources]).encode()).hexdigest()
    folder = store.root / ".cache" / "intervals"
    try:
        kept = read_json(folder / f"{fingerprint[:32]}.json", required=("intervals",))
    except OSError:  # the cache's place is not a folder: draw them
        kept = None
    if kept is not None:
        return {tuple(k): CellInterval(*v) for k, v in kept["intervals"]}  # type: ignore[misc]
    out = _intervals(store, listed, baseline)
    try:  # a cache: a results place this process cannot write to is read all the same
        write_json(folder / f"{fingerprint[:32]}.json",
                   {"intervals": [[list(k), list(astuple(v))] for k, v in out.items()]})
        by_age = sorted(folder.glob("*.json"), key=lambda f: f.stat().st_mtime_ns)
        for old in by_age[:-CACHED_TABLES]:  # a bounded folder: the newest tables' intervals
            old.unlink(missing_ok=True)
    except (OSError, StoreError):
        pass
    return out


CACHED_TABLES = 64  # fingerprints kept in .cache/intervals/ (every table of both papers, and the summary's)
# the code an interval is drawn by: this module, and the store's choice of a cell's first n records
_SOURCE = hashlib.sha256(Path(__file__).read_bytes() + Path(first_records.__code__.co_filename).read_bytes()).hexdigest()


def _intervals(store: ResultsStore, listed: list, baseline: str) -> dict[Key, CellInterval]:
    """:func:`table_intervals` computed from the records of ``listed`` (rows whose records file exists)."""
    scores: dict[Key, dict[str, float]] = {}
    for r in listed:
        got = cell_scores(store, r, r.metric)
        if got and len(got) == int(r.n):
            scores[(r.model, r.method, r.task, str(r.setting), r.metric)] = got
    out: dict[Key, CellInterval] = {}
    binary = {key: is_right_or_wrong(list(got.values())) for key, got in scores.items()}
    for key, got in scores.items():
        lo, hi = mean_ci(list(got.values()))
        base_key = (key[0], baseline, *key[2:])
        base = scores.get(base_key)
        if key[1] != baseline and base is not None and set(base) == set(got):
            ids = sorted(got)
            delta, dlo, dhi = difference_ci([got[i] for i in ids], [base[i] for i in ids])
            kind = "score" if binary[key] and binary[base_key] else "bootstrap"
            out[key] = CellInterval(len(got), lo, hi, delta, dlo, dhi, kind)
        else:
            out[key] = CellInterval(len(got), lo, hi, kind="score" if binary[key] else "bootstrap")
    return out


def is_right_or_wrong(values: Sequence[float]) -> bool:
    """Whether every score is 0 or 100 (accuracy in %, one example right or wrong)."""
    return all(v in (0.0, 100.0) for v in values)


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """A cell's interval: Wilson (in %) for right/wrong scores, else the bootstrap of the mean (the same scores
    give the same interval: it is computed once per process, however many tables show the cell)."""
    return _mean_ci(tuple(float(v) for v in values))


@lru_cache(maxsize=8192)
def _mean_ci(values: tuple[float, ...]) -> tuple[float, float]:
    if len(values) and is_right_or_wrong(values):
        lo, hi = wilson_ci(sum(v == 100.0 for v in values), len(values))
        return 100 * lo, 100 * hi
    return bootstrap_mean_ci(values)


def difference_ci(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """A paired difference's interval: Newcombe's (in % points) for right/wrong scores, else the bootstrap (once
    per process for the same pairs, like :func:`mean_ci`)."""
    return _difference_ci(tuple(float(v) for v in a), tuple(float(v) for v in b))


@lru_cache(maxsize=8192)
def _difference_ci(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, float, float]:
    if len(a) and is_right_or_wrong(a) and is_right_or_wrong(b):
        diff, lo, hi = newcombe_paired_ci([v == 100.0 for v in a], [v == 100.0 for v in b])
        return 100 * diff, 100 * lo, 100 * hi
    return paired_difference_ci(a, b)
