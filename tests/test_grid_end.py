"""Where Algorithm 1 stops at its grid's end without reaching S̄_tr(1): the flag on the Alignment, in results rows
(``message``), in the summary, the paper tables and the reading lines (``0.50*``), and the extension grid below the
paper's floor (``method.tau_min``; docs/mini-t5-study.md)."""

from __future__ import annotations

import json

import pytest

from lengthx.alignment.algorithm1 import TEMPERATURE_GRID, align_temperature, temperature_grid
from lengthx.core.store import SHORT_OF_TARGET, ResultsStore
from lengthx.core.tau import short_of_target
from lengthx.report.tables.reading import readings
from lengthx.report.tables.render import UNALIGNED_NOTE
from lengthx.report.tables.summary import summary_markdown


def test_the_paper_grid_is_the_default_and_a_lower_floor_extends_it():
    assert temperature_grid() == TEMPERATURE_GRID
    assert temperature_grid(0.2)[:11] == TEMPERATURE_GRID and temperature_grid(0.2)[-1] == 0.2
    with pytest.raises(ValueError, match="between 0 and 1"):
        temperature_grid(0.0)


@pytest.mark.parametrize("search", ["grid", "bisect"])
def test_a_target_beyond_the_floor_is_flagged_and_one_inside_is_not(search):
    """P_max rises as τ falls; a target above S̄(0.5) is out of the paper grid's reach (flagged at 0.50), and the
    extended grid reaches it (not flagged)."""
    def statistic(t: float) -> float:
        return 1.0 - t  # S̄(0.5) = 0.5, S̄(0.3) = 0.7

    short = align_temperature(statistic, 0.7, "pmax", search)
    assert short.tau == 0.5 and short.short_of_target("pmax")
    reached = align_temperature(statistic, 0.7, "pmax", search, temperature_grid(0.2))
    assert reached.tau == 0.3 and not reached.short_of_target("pmax")
    inside = align_temperature(statistic, 0.3, "pmax", search)
    assert inside.tau == 0.7 and not inside.short_of_target("pmax")
    # entropy falls as τ falls: a target below S̄(0.5) is out of reach
    assert align_temperature(lambda t: t, 0.2, "entropy", search).short_of_target("entropy")
    # at the top: P_max at τ = 1 already above its target (it would want τ > 1)
    top = align_temperature(statistic, -0.1, "pmax", search)
    assert top.tau == 1.0 and top.short_of_target("pmax")


def test_the_cache_entry_says_the_same_per_layer_too():
    one = {"tau": 0.5, "target": 0.7, "evaluated": {"1.0": 0.1, "0.5": 0.5}}
    assert short_of_target(one, "pmax", 0.5) and not short_of_target(one, "pmax", 0.2)
    assert not short_of_target({**one, "target": 0.5}, "pmax", 0.5)
    layers = {"tau": [0.7, 0.5], "target": [0.3, 0.9], "evaluated": [{"0.7": 0.3}, {"0.5": 0.6}]}
    assert short_of_target(layers, "pmax", 0.5)
    assert not short_of_target({"tau": 0.5}, "pmax", 0.5)  # an entry without its search: nothing to say


def _rows(store: ResultsStore, method: str, tau: float, message: str = "") -> None:
    key, chash = f"mini|{method}|passkey|55k", f"h-{method}"
    right = [True] * 5 + [False] * 5
    for i, r in enumerate(right):
        store.append_record(key, {"id": f"0-{i}", "config_hash": chash, "scores": {"accuracy": 100.0 * r}})
    store.append_rows([{"paper": "A", "table": "4", "model": "mini", "method": method, "task": "passkey",
                        "setting": "55k", "metric": m, "value": v, "n": 10, "status": "ok", "cell": key,
                        "config_hash": chash, "tau": tau, "L_tr": 256, "L_req": 7424, "L_ex": 7424,
                        "message": message, "timestamp": "2026-01-01T00:00:00"}
                       for m, v in (("accuracy", 50.0), ("tau", tau))], key, chash)


def test_tables_mark_a_grid_end_tau_and_say_why(tmp_path):
    store = ResultsStore(tmp_path)
    _rows(store, "none", 1.0)
    _rows(store, "pmax", 0.5, SHORT_OF_TARGET)
    _rows(store, "entropy", 0.55)
    df = store.read()
    summary = summary_markdown(df)
    assert "τ=0.50*, n=10" in summary and "τ=0.55, n=10" in summary and UNALIGNED_NOTE in summary
    lines = readings(store, df)
    assert "(τ = 0.50*, the grid's end, short of S̄_tr(1))" in lines[0] and "(τ = 0.55)" in lines[0]
    from lengthx.cli import main

    main(["tables", "--results-dir", str(tmp_path)])
    table9 = (tmp_path / "tables" / "aa_table9.md").read_text()
    assert "0.50*" in table9 and UNALIGNED_NOTE in table9 and "0.55*" not in table9


def test_a_plain_table_has_no_mark_or_note(tmp_path):
    store = ResultsStore(tmp_path)
    _rows(store, "none", 1.0)
    _rows(store, "pmax", 0.5)
    assert "*" not in summary_markdown(store.read())


@pytest.mark.slow
def test_runs_below_the_paper_floor_are_their_own_method_and_their_rows_say_where_they_stopped(tiny_model_dir,
                                                                                              tmp_path, as_a_process):
    """A floor other than the paper's is another method (its own cells and calibration cache), and every Algorithm
    1 row carries the flag exactly when its cache entry is a grid end short of the target: here the paper's grid
    aligns (τ inside it) and a grid that stops at 0.9 does not."""
    res = tmp_path / "res"
    common = [f"model.path={tiny_model_dir}", "model.l_tr=300", "task.num_examples=2", "task.settings=[1200]",
              f"results_dir={res}", "calibration.num_examples=1", "calibration.row_stride=1"]
    for extra in ([], ["method.tau_min=0.9", "method.search=bisect"]):
        p = as_a_process(["lengthx", "run", "task=passkey", "method=pmax", *common, *extra])
        assert p.returncode == 0, p.stderr[-2000:]
    df = ResultsStore(res).read()
    assert set(df["method"]) == {"pmax", "pmax-bisect-min0.9"} and (df["status"] == "ok").all()
    assert len(list((res / "calibration").glob("*.json"))) == 2
    for f in (res / "calibration").glob("*.json"):
        entry = json.loads(f.read_text())
        method = "pmax-bisect-min0.9" if entry.get("tau_min") == 0.9 else "pmax"
        rows = df[df["method"] == method]
        floor = entry.get("tau_min", 0.5)
        assert (rows["message"] == SHORT_OF_TARGET).all() == short_of_target(entry, "pmax", floor)
        assert float(entry["tau"]) >= floor
    flagged = df[df["message"] == SHORT_OF_TARGET]
    assert set(flagged["method"]) == {"pmax-bisect-min0.9"} and set(flagged["tau"]) == {0.9}
