"""The demo's reading lines (lengthx/report/tables/reading.py): values, intervals and the paired difference to
τ = 1 of each setting, checked against an independent Wilson / Newcombe computation."""

from __future__ import annotations

from lengthx.core.store import ResultsStore
from lengthx.report.tables.intervals import newcombe_paired_ci, wilson_ci
from lengthx.report.tables.reading import readings


def _cell(store: ResultsStore, method: str, setting: str, right: list[bool], l_req: int, tau: float) -> None:
    key = f"mini|{method}|passkey|{setting}"
    chash = f"h-{method}-{setting}"
    for i, r in enumerate(right):
        store.append_record(key, {"id": f"0-{i}", "config_hash": chash, "scores": {"accuracy": 100.0 * r}})
    rows = [{"paper": "A", "table": "4", "model": "mini", "method": method, "task": "passkey", "setting": setting,
             "metric": metric, "value": value, "n": len(right), "status": "ok", "cell": key, "config_hash": chash,
             "tau": tau, "L_tr": 256, "L_req": l_req, "L_ex": l_req, "timestamp": f"2026-01-01T00:00:{l_req % 60:02d}"}
            for metric, value in (("accuracy", 100.0 * sum(right) / len(right)), ("tau", tau))]
    store.append_rows(rows, key, chash)


def test_a_reading_gives_both_cells_with_intervals_the_paired_difference_and_l_tr(tmp_path):
    store = ResultsStore(tmp_path)
    at_l_tr = [True] * 19 + [False]
    none = [True] * 8 + [False] * 12
    pmax = [True] * 8 + [True] * 7 + [False] * 5  # the same 8 right, 7 more
    _cell(store, "none", "256tokens", at_l_tr, 256, 1.0)
    _cell(store, "none", "7424tokens", none, 7424, 1.0)
    _cell(store, "pmax", "7424tokens", pmax, 7424, 0.5)
    (line,) = readings(store, store.read())  # the L_tr setting has no second method: no line of its own
    lo, hi = wilson_ci(8, 20)
    l_lo, l_hi = wilson_ci(19, 20)
    p_lo, p_hi = wilson_ci(15, 20)
    d, d_lo, d_hi = newcombe_paired_ci(pmax, none)
    assert line == (f"mini passkey 7424tokens (29× L_tr, n = 20): τ = 1 40% [{100 * lo:.0f}, {100 * hi:.0f}] "
                    f"(95% [{100 * l_lo:.0f}, {100 * l_hi:.0f}] at L_tr), pmax 75% [{100 * p_lo:.0f}, {100 * p_hi:.0f}] "
                    f"(τ = 0.50), Δ {100 * d:+.0f} [{100 * d_lo:+.0f}, {100 * d_hi:+.0f}]")
    assert d_lo > 0  # 7 discordant pairs, all one way: resolved


def test_tables_summary_prints_the_readings(tmp_path, capsys):
    from lengthx.cli import main

    store = ResultsStore(tmp_path)
    _cell(store, "none", "7424tokens", [True] * 8 + [False] * 12, 7424, 1.0)
    _cell(store, "pmax", "7424tokens", [True] * 15 + [False] * 5, 7424, 0.5)
    main(["tables", "--summary", "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    (line,) = readings(store, store.read())
    assert f"- {line}" in out and "pmax 75%" in line


def test_a_topics_reading_says_how_many_conversations_each_length_holds(tmp_path):
    """Past L_tr a benchmark record holds more topics than at L_tr: the line says so for both (from the records'
    meta), so a reader sees whether the stand-in was ever asked that count at its training length."""
    store = ResultsStore(tmp_path)

    def cell(method: str, setting: str, l_req: int, counts: list[int], right: list[bool]) -> None:
        key, chash = f"mini|{method}|topics|{setting}", f"h-{method}-{setting}"
        for i, (k, r) in enumerate(zip(counts, right, strict=True)):
            store.append_record(key, {"id": f"0-{i}", "config_hash": chash, "scores": {"accuracy": 100.0 * r},
                                      "meta": {"n_topics": k}})
        store.append_rows([{"paper": "A", "table": "4", "model": "mini", "method": method, "task": "topics",
                            "setting": setting, "metric": "accuracy", "value": 100.0 * sum(right) / len(right),
                            "n": len(right), "status": "ok", "cell": key, "config_hash": chash, "tau": 1.0,
                            "L_tr": 256, "L_req": l_req, "L_ex": l_req, "timestamp": "2026-01-01T00:00:00"}], key, chash)

    cell("none", "256tokens", 256, [2, 3, 4, 2], [True] * 4)
    cell("none", "1024tokens", 1024, [10, 12, 15, 11], [True, False, False, False])
    cell("pmax", "1024tokens", 1024, [10, 12, 15, 11], [True] * 4)
    (line,) = readings(store, store.read())
    assert line.startswith("mini topics 1024tokens (4× L_tr, 10-15 topics, n = 4): τ = 1 25%")
    assert "at L_tr, 2-4 topics)" in line
