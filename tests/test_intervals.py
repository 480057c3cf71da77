"""Confidence intervals of table cells from their records (lengthx/tables/intervals.py)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from lengthx.core.store import ResultsStore
from lengthx.report.tables.intervals import bootstrap_mean_ci, paired_difference_ci, table_intervals
from lengthx.report.tables.paper_a import TABLE3
from lengthx.report.tables.render import latest_ok, render


def test_bootstrap_interval_matches_the_normal_approximation_for_many_examples():
    rng = random.Random(3)
    x = [rng.gauss(10.0, 2.0) for _ in range(3000)]
    lo, hi = bootstrap_mean_ci(x)
    mean, se = sum(x) / len(x), np.std(x) / math.sqrt(len(x))
    assert lo < mean < hi
    assert (hi - lo) == pytest.approx(2 * 1.959964 * se, rel=0.1)  # CLT: mean ± 1.96 standard errors
    assert bootstrap_mean_ci([4.0] * 7) == (4.0, 4.0)


def test_paired_difference_removes_the_shared_per_example_variation():
    rng = random.Random(0)
    base = [rng.uniform(5, 50) for _ in range(200)]  # examples differ a lot
    other = [b + 0.3 + rng.gauss(0, 0.1) for b in base]  # a method moves every example by about +0.3
    delta, lo, hi = paired_difference_ci(other, base)
    assert delta == pytest.approx(sum(o - b for o, b in zip(other, base, strict=True)) / 200)
    assert 0 < lo < 0.3 < hi < 0.35  # resolved, although the two unpaired intervals overlap:
    a_lo, a_hi = bootstrap_mean_ci(other)
    b_lo, b_hi = bootstrap_mean_ci(base)
    assert a_lo < b_hi
    with pytest.raises(ValueError, match="same examples"):
        paired_difference_ci([1.0], [1.0, 2.0])


def _cell(store: ResultsStore, method: str, setting: str, values: list[float], chash: str) -> None:
    key = f"m|{method}|lm|{setting}"
    for i, v in enumerate(values):
        store.append_record(key, {"id": f"0-{i}", "config_hash": chash, "scores": {"perplexity": v, "nll": 0.0}})
    row = {"paper": "A", "table": "3", "model": "m", "method": method, "task": "lm", "setting": setting,
           "metric": "perplexity", "value": sum(values) / len(values), "n": len(values), "status": "ok",
           "cell": key, "config_hash": chash, "timestamp": f"2026-01-01T00:00:0{len(method) % 10}"}
    store.append_rows([row], key, chash)


def test_intervals_come_from_the_rows_own_records_and_render_beside_the_value(tmp_path):
    store = ResultsStore(tmp_path)
    base = [10.0, 12.0, 30.0, 14.0, 11.0, 13.0]
    _cell(store, "none", "1024", base, "h-none")
    _cell(store, "pmax", "1024", [b - 1.0 for b in base], "h-pmax")
    # records of an older configuration of the same cell do not count
    store.append_record("m|pmax|lm|1024", {"id": "0-9", "config_hash": "old", "scores": {"perplexity": 1e6}})
    # a cell whose records are incomplete gets no interval rather than a partial one
    _cell(store, "none", "2048", [5.0, 6.0], "h-short")
    store.append_rows([{**store.read().iloc[-1].to_dict(), "n": 3}], "m|none|lm|2048", "h-short-3")
    ok = latest_ok(store.read())
    iv = table_intervals(store, ok, {"lm"}, {"perplexity"})
    assert iv[("m", "none", "lm", "1024", "perplexity")].n == 6
    pm = iv[("m", "pmax", "lm", "1024", "perplexity")]
    assert (pm.delta, pm.delta_low, pm.delta_high) == pytest.approx((-1.0, -1.0, -1.0))
    assert pm.low == pytest.approx(bootstrap_mean_ci([b - 1.0 for b in base])[0])
    assert ("m", "none", "lm", "2048", "perplexity") not in iv
    text = render(TABLE3, store.read(), store=store).markdown
    lo, hi = bootstrap_mean_ci(base)
    assert f"{sum(base) / 6:.1f} [{lo:.1f}, {hi:.1f}]" in text
    assert "Paired difference to τ = 1" in text and "-1.0 [-1.0, -1.0]" in text
    assert "[" not in render(TABLE3, store.read()).markdown  # no store, no intervals
