"""Results store: schema checks, no duplicate cells, records survive a torn line (docs/design.md §7)."""

import pytest

from lengthx.core.store import ResultsStore


def _row(**kw):
    base = dict(paper="A", table="4", model="m", method="none", task="passkey", setting="20k",
                metric="accuracy", value=50.0, n=2, status="ok", cell="m|none|passkey|20k", config_hash="h")
    return {**base, **kw}


def test_cell_rows_are_written_once(tmp_path):
    store = ResultsStore(tmp_path)
    assert store.append_rows([_row()], "m|none|passkey|20k", "h")
    assert not store.append_rows([_row(value=99.0)], "m|none|passkey|20k", "h")
    assert store.append_rows([_row(status="error", value="")], "m|none|passkey|30k", "h")
    df = store.read()
    assert len(df) == 2 and df.loc[0, "value"] == 50.0
    assert store.is_done("m|none|passkey|20k", "h") and not store.is_done("m|none|passkey|30k", "h")
    assert not store.is_done("m|none|passkey|20k", "other-config")


def test_identities_that_look_like_numbers_are_read_as_text(tmp_path):
    """A commit such as 8559e63 (pandas reads it as 8.559e+66) and hashes of digits only (0123 would lose its 0)
    come back from results.csv exactly as written, so comparisons with this checkout's commit and a cell's
    config hash hold; numeric columns stay numbers."""
    store = ResultsStore(tmp_path)
    cell = "m|none|passkey|20k"
    assert store.append_rows([_row(git_commit="8559e63", config_hash="012345678901", versions="1e5")], cell,
                             "012345678901")
    df = store.read()
    assert df.loc[0, "git_commit"] == "8559e63" and df.loc[0, "config_hash"] == "012345678901"
    assert df.loc[0, "versions"] == "1e5" and df.loc[0, "value"] == 50.0 and df.loc[0, "n"] == 2
    assert store.is_done(cell, "012345678901")
    assert not store.append_rows([_row(config_hash="012345678901")], cell, "012345678901")  # done: not twice


def test_bad_rows_are_refused(tmp_path):
    store = ResultsStore(tmp_path)
    with pytest.raises(KeyError):
        store.append_rows([_row(bogus=1)], "c", "h")
    with pytest.raises(ValueError):
        store.append_rows([_row(status="fine")], "c", "h")


def test_records_skip_a_torn_line(tmp_path):
    store = ResultsStore(tmp_path)
    store.append_record("c", {"id": "a", "scores": {"x": 1}})
    with open(store.records_path("c"), "a") as fh:
        fh.write('{"id": "b", "x"')  # a kill in the middle of a write
    store.append_record("c", {"id": "c", "scores": {"x": 3}})
    assert sorted(store.load_records("c")) == ["a", "c"]
