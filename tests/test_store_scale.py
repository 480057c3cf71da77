"""``results.csv`` read in one pass when every row is sound, and parsed once per file version
(lengthx.core.store.cache, docs/results.md): the one-pass reading keeps every check of the row-by-row one —
rows that look odd but are results stay, a row that is not a result is still named and left out — and a write
is seen by the next read."""

from __future__ import annotations

import logging

import pytest

from lengthx.core.store import COLUMNS, HEADER, ResultsStore

CELL = "mini-t5|none|passkey|20k"


def _line(**fields: str) -> str:
    base = {"paper": "A", "model": "mini-t5", "method": "none", "task": "passkey", "setting": "20k",
            "metric": "accuracy", "value": "50.0", "n": "10", "status": "ok", "cell": CELL,
            "config_hash": "aaaaaaaaaaaa", "tau": "1.0", "timestamp": "2026-01-01T00:00:00"}
    base.update(fields)
    return ",".join(base.get(c, "") for c in COLUMNS) + "\n"


# rows that are results although a column holds text: per-row rules and per-layer τ, status rows without a value
GOOD = [_line(), _line(tau="logn"), _line(tau="0.5;0.6"), _line(metric="tau", value="0.7", tau="0.7"),
        _line(status="error", value="", n="", tau="", message="boom"), _line(status="oom", value="", n="0")]


def test_rows_that_look_odd_but_are_results_are_all_read(tmp_path):
    (tmp_path / "results.csv").write_text(HEADER + "\n" + "".join(GOOD))
    df = ResultsStore(tmp_path).read()
    assert len(df) == len(GOOD)
    assert df["tau"].tolist()[:3] == ["1.0", "logn", "0.5;0.6"] and df["status"].tolist()[-2:] == ["error", "oom"]


@pytest.mark.parametrize("bad,why", [
    (_line(tau="nan"), "has tau nan"),
    (_line(tau="-1_0"), "has tau -1_0"),
    (_line(tau="-0.5"), "has tau -0.5"),
    (_line(value="inf"), "has value 'inf'"),
    (_line(value=""), "has value ''"),
    (_line(n="2.5"), "has n '2.5'"),
    (_line(n="-1"), "has n '-1'"),
    (_line(config_hash=""), "is an ok row without config_hash"),
    (_line(status="done"), "has status 'done'"),
    (_line(status="error", value="nan"), "has value 'nan'"),
])
def test_a_row_that_is_not_a_result_is_still_named_and_left_out(tmp_path, caplog, bad, why):
    (tmp_path / "results.csv").write_text(HEADER + "\n" + "".join(GOOD) + bad)
    with caplog.at_level(logging.WARNING):
        df = ResultsStore(tmp_path).read()
    assert len(df) == len(GOOD)
    (warning,) = [r.getMessage() for r in caplog.records if "line" in r.getMessage()]
    assert f"line {len(GOOD) + 2} {why}" in warning


def test_a_write_is_seen_by_the_next_read(tmp_path):
    """The parsed frame is kept per file version: an append (a larger file) or a rewrite (a new file by rename)
    is read again, and the frame a caller gets is its own copy."""
    store = ResultsStore(tmp_path)
    (tmp_path / "results.csv").write_text(HEADER + "\n" + GOOD[0])
    first = store.read()
    first.loc[0, "value"] = -1.0  # a caller's change does not reach the kept frame
    assert store.read()["value"].tolist() == [50.0]
    row = {c: v for c, v in zip(COLUMNS, GOOD[0].rstrip("\n").split(","), strict=True) if v}
    store.append_rows([{**row, "cell": "other", "config_hash": "bbbbbbbbbbbb"}], "other", "bbbbbbbbbbbb")
    assert store.read()["cell"].tolist() == [CELL, "other"]
    (tmp_path / "results.csv").write_text(HEADER + "\n" + GOOD[1])  # rewritten in place: another size
    assert store.read()["tau"].tolist() == ["logn"]
