"""What the results store reads back does not depend on wall clocks or on which of two contradicting records
comes last (docs/results.md): the newest row of a cell is the last one written, rows dated in the future are
named; two records of one example under one configuration are named, set aside and the example recomputed."""

from __future__ import annotations

import json
import logging

import pandas as pd

import lengthx
from lengthx.core.store import ResultsStore
from lengthx.report.tables.render import latest_ok

CELL = "mini-t5|none|passkey|20k"


def _row(chash: str, value: float, timestamp: str, n: int = 10) -> dict:
    return {"paper": "A", "table": "4", "model": "mini-t5", "method": "none", "task": "passkey", "setting": "20k",
            "metric": "accuracy", "value": value, "n": n, "status": "ok", "cell": CELL, "config_hash": chash,
            "timestamp": timestamp}


def test_the_newest_row_is_the_last_written_not_the_latest_dated(tmp_path, caplog):
    """A row written on a machine whose clock ran ahead (dated 2030) does not hide a row written after it: the
    tables and ``read_results`` show the later row, and a warning names the row dated in the future."""
    store = ResultsStore(tmp_path)
    store.append_rows([_row("aaaaaaaaaaaa", 50.0, "2030-01-01T00:00:00")], CELL, "aaaaaaaaaaaa")
    store.append_rows([_row("bbbbbbbbbbbb", 100.0, "2026-01-02T00:00:00")], CELL, "bbbbbbbbbbbb")
    with caplog.at_level(logging.WARNING):
        latest = latest_ok(store.read())
    assert latest["value"].tolist() == [100.0]
    warnings = [r.getMessage() for r in caplog.records if "future" in r.getMessage()]
    assert len(warnings) == 1 and "2030-01-01T00:00:00" in warnings[0] and CELL in warnings[0]
    assert lengthx.read_results(tmp_path)["value"].tolist() == [100.0]


def test_a_larger_run_still_wins_over_a_later_smaller_one(tmp_path):
    """Within one configuration the largest finished run is shown, whatever the order or the dates."""
    store = ResultsStore(tmp_path)
    store.append_rows([_row("aaaaaaaaaaaa", 60.0, "2026-01-01T00:00:00", n=20)], CELL, "aaaaaaaaaaaa")
    df = store.read()
    smaller = df.assign(value=[40.0], n=[5], timestamp=["2031-01-01T00:00:00"])
    assert latest_ok(pd.concat([df, smaller], ignore_index=True))["value"].tolist() == [60.0]


def _record(example: str, score: float, chash: str = "cccccccccccc") -> bytes:
    return (json.dumps({"id": example, "config_hash": chash, "prompt_hash": "p", "scores": {"accuracy": score}})
            + "\n").encode()


def test_two_records_of_one_example_are_named_set_aside_and_recomputed(tmp_path, caplog):
    """Example ``0-0`` recorded twice under one configuration (100, then 0): neither is read (the run computes
    it again), both lines go to a side file, a warning names the file, the id and both lines; ``0-1`` is kept."""
    store = ResultsStore(tmp_path)
    path = store.records_path(CELL)
    path.parent.mkdir(parents=True)
    path.write_bytes(_record("0-0", 100.0) + _record("0-1", 100.0) + _record("0-0", 0.0))
    with caplog.at_level(logging.WARNING):
        records = store.load_records(CELL, repair=True)
    assert list(records) == ["0-1"]
    (side,) = tmp_path.glob("records/*.corrupt-*")
    assert side.read_bytes() == _record("0-0", 100.0) + _record("0-0", 0.0)
    assert path.read_bytes() == _record("0-1", 100.0)
    (warning, *rest) = [r.getMessage() for r in caplog.records if "0-0" in r.getMessage()]
    assert str(path) in warning and "lines 1, 3" in warning


def test_a_record_recomputed_under_a_new_configuration_is_not_a_conflict(tmp_path):
    """The same example under two configurations (a recomputed cell appends its new record): the last is read."""
    store = ResultsStore(tmp_path)
    path = store.records_path(CELL)
    path.parent.mkdir(parents=True)
    path.write_bytes(_record("0-0", 100.0, "old000000000") + _record("0-0", 0.0, "new000000000"))
    records = store.load_records(CELL, repair=True)
    assert records["0-0"]["config_hash"] == "new000000000"
    assert not list(tmp_path.glob("records/*.corrupt-*"))
