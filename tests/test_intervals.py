"""Confidence intervals of table cells from their records (lengthx/report/tables/intervals.py)."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

import numpy as np
import pytest

from lengthx.core.store import ResultsStore
from lengthx.report.tables.intervals import (
    bootstrap_mean_ci,
    difference_ci,
    mean_ci,
    newcombe_paired_ci,
    paired_difference_ci,
    table_intervals,
    wilson_ci,
)
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


def test_a_tables_intervals_are_kept_and_redrawn_when_a_record_changes(tmp_path):
    store = ResultsStore(tmp_path)
    _cell(store, "none", "1024", [10.0, 12.0, 30.0, 14.0], "h-none")
    _cell(store, "pmax", "1024", [9.0, 11.0, 29.0, 13.0], "h-pmax")
    first = table_intervals(store, latest_ok(store.read()), {"lm"}, {"perplexity"})
    kept = list((tmp_path / ".cache" / "intervals").glob("*.json"))
    assert len(kept) == 1  # the next command that shows these cells reads them
    assert table_intervals(store, latest_ok(store.read()), {"lm"}, {"perplexity"}) == first
    # a records file rewritten under the same row: a new fingerprint, intervals drawn from the new records
    path = store.records_path("m|pmax|lm|1024")
    path.write_text(path.read_text().replace('"perplexity": 9.0', '"perplexity": 1.0'))
    again = table_intervals(store, latest_ok(store.read()), {"lm"}, {"perplexity"})
    key = ("m", "pmax", "lm", "1024", "perplexity")
    assert again[key].delta == pytest.approx(first[key].delta - 2.0)
    assert len(list((tmp_path / ".cache" / "intervals").glob("*.json"))) == 2


def test_intervals_are_drawn_where_their_cache_cannot_be_written(tmp_path):
    store = ResultsStore(tmp_path)
    _cell(store, "none", "1024", [10.0, 12.0, 30.0, 14.0], "h-none")
    (tmp_path / ".cache").mkdir(exist_ok=True)
    (tmp_path / ".cache" / "intervals").write_text("a file where the cache's folder would be")
    got = table_intervals(store, latest_ok(store.read()), {"lm"}, {"perplexity"})
    assert got[("m", "none", "lm", "1024", "perplexity")].n == 4


def _score_bound(k: int, n: int, z: float, upper: bool) -> float:
    """The Wilson bound found independently: bisection on the score test's boundary."""
    p_hat = k / n
    lo, hi = (p_hat, 1.0) if upper else (0.0, p_hat)

    def inside(p: float) -> bool:
        return (p_hat - p) ** 2 <= z * z * p * (1 - p) / n

    for _ in range(200):
        mid = (lo + hi) / 2
        if inside(mid) == upper:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (47, 50), (1, 3)])
def test_wilson_bounds_solve_the_score_test(k, n):
    z = NormalDist().inv_cdf(0.975)
    lo, hi = wilson_ci(k, n)
    assert lo == pytest.approx(_score_bound(k, n, z, upper=False), abs=1e-9)
    assert hi == pytest.approx(_score_bound(k, n, z, upper=True), abs=1e-9)


def _coverage(interval, truth: float, draw, trials: int = 3000) -> float:
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(trials):
        lo, hi = interval(*draw(rng))
        hits += lo - 1e-12 <= truth <= hi + 1e-12
    return hits / trials


def test_accuracy_intervals_cover_the_truth_where_the_bootstrap_does_not():
    """Ten examples of a 95%-accurate model: the bootstrap's interval is [100, 100] whenever all ten are right
    (60% of the time), so it misses the truth; Wilson's stays near its 95% (here 91%: its coverage dips where
    the truth sits just below a possible score, Brown, Cai and DasGupta 2001)."""
    n, p = 10, 0.95

    def draw(rng):
        return ((rng.random(n) < p) * 100.0,)

    assert _coverage(lambda x: bootstrap_mean_ci(x, n_boot=200), 95.0, draw, 500) < 0.5
    assert _coverage(mean_ci, 95.0, draw) >= 0.90


@pytest.mark.parametrize(("n", "p_both", "p_only_a", "p_only_b"), [(20, 0.5, 0.2, 0.05), (10, 0.8, 0.1, 0.0),
                                                                  (50, 0.3, 0.1, 0.1)])
def test_paired_accuracy_differences_cover_the_truth(n, p_both, p_only_a, p_only_b):
    probs = [p_both, p_only_a, p_only_b, 1 - p_both - p_only_a - p_only_b]

    def draw(rng):
        kind = rng.choice(4, size=n, p=probs)
        return (np.isin(kind, [0, 1]) * 100.0).tolist(), (np.isin(kind, [0, 2]) * 100.0).tolist()

    truth = 100 * (p_only_a - p_only_b)
    assert _coverage(lambda a, b: difference_ci(a, b)[1:], truth, draw) >= 0.93


def test_newcombe_is_antisymmetric_and_bounded():
    a = [True] * 6 + [False] * 4
    b = [True] * 3 + [False] * 7
    d, lo, hi = newcombe_paired_ci(a, b)
    d2, lo2, hi2 = newcombe_paired_ci(b, a)
    assert d == pytest.approx(0.3) and (d2, lo2, hi2) == pytest.approx((-d, -hi, -lo))
    assert -1 <= lo < d < hi <= 1
    same = newcombe_paired_ci(a, a)
    assert same[0] == 0 and same[1] < 0 < same[2]  # no example differs, yet ten examples leave room


def test_accuracy_cells_render_score_intervals(tmp_path):
    store = ResultsStore(tmp_path)
    for method, right in (("none", 10), ("pmax", 7)):
        key = f"m|{method}|passkey|20k"
        for i in range(10):
            store.append_record(key, {"id": f"0-{i}", "config_hash": method, "scores": {"accuracy": 100.0 * (i < right)}})
        store.append_rows([{"paper": "A", "table": "4", "model": "m", "method": method, "task": "passkey",
                            "setting": "20k", "metric": "accuracy", "value": 10.0 * right, "n": 10, "status": "ok",
                            "cell": key, "config_hash": method, "timestamp": f"2026-01-01T00:00:0{right - 5}"}],
                          key, method)
    iv = table_intervals(store, latest_ok(store.read()), {"passkey"}, {"accuracy"})
    full = iv[("m", "none", "passkey", "20k", "accuracy")]
    assert (full.low, full.high) == pytest.approx(tuple(100 * x for x in wilson_ci(10, 10)))
    assert full.low < 75
    pm = iv[("m", "pmax", "passkey", "20k", "accuracy")]
    assert (pm.delta, pm.delta_low, pm.delta_high) == pytest.approx(
        tuple(100 * x for x in newcombe_paired_ci([i < 7 for i in range(10)], [True] * 10)))
    from lengthx.report.tables.paper_a import TABLE4

    text = render(TABLE4, store.read(), store=store).markdown
    assert "100 [72, 100]" in text and "Wilson score interval" in text and "bootstrap" not in text


def test_paper_b_cells_pair_with_ootb_under_their_trained_run(tmp_path):
    """Paper B's rows read runs trained for a column's length (``chunk-0.25@2L_t``); their intervals do too,
    and the paired differences are to OOTB on the same sequences, under a header per model."""
    from lengthx.report.tables import TABLES

    store = ResultsStore(tmp_path)
    ppl = {"ootb": [30.0, 42.0, 35.0, 50.0], "chunk-0.25@2L_t": [25.0, 40.0, 31.0, 41.0]}
    for method, values in ppl.items():
        key = f"gpt2|{method}|segmented_ppl|2L_t"
        for i, v in enumerate(values):
            store.append_record(key, {"id": f"doc#{i}", "config_hash": method, "scores": {"ppl": v}})
        store.append_rows([{"paper": "B", "table": "3", "model": "gpt2", "method": method, "task": "segmented_ppl",
                            "setting": "2L_t", "metric": "ppl", "value": sum(values) / 4, "n": 4, "status": "ok",
                            "cell": key, "config_hash": method, "timestamp": "2026-01-01T00:00:00"}], key, method)
    text = render(TABLES["sb_table3"], store.read(), store=store).markdown
    lo, hi = bootstrap_mean_ci(ppl["chunk-0.25@2L_t"])
    assert f"| w/ chunk-0.25 | 34.250 [{lo:.3f}, {hi:.3f}] |" in text
    paired = text.split("Paired difference to OOTB on the same examples")[1]
    d, dlo, dhi = paired_difference_ci(ppl["chunk-0.25@2L_t"], ppl["ootb"])
    assert "| **GPT-2** |" in paired and f"| w/ chunk-0.25 | {d:.3f} [{dlo:.3f}, {dhi:.3f}] |" in paired
