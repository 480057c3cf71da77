"""The parsed copy of ``results.csv`` kept beside it (lengthx.core.store.sidecar, docs/results.md): a new process
reads the copy instead of parsing and checking every row again, gets exactly the frame a parse gives, and never
reads a copy of other bytes: the file stays the truth."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from lengthx.core.store import COLUMNS, HEADER, ResultsStore
from lengthx.core.store import cache as store_cache
from lengthx.core.store import results as store_module
from lengthx.core.store.sidecar import SIDECAR

COMMITTED = Path(__file__).resolve().parents[1] / "results" / "mini" / "results.csv"


def _new_process() -> None:
    """Forget what this process has read (a new process knows nothing but the files)."""
    store_cache._FRAMES.clear()


def _no_parsing(monkeypatch) -> None:
    """Make parsing the CSV fail, so a read that succeeds read the copy."""
    def refuse(*_a, **_k):
        raise AssertionError("results.csv was parsed again")

    monkeypatch.setattr(store_module, "csv_problem", refuse)
    monkeypatch.setattr(store_module, "fast_frame", refuse)
    monkeypatch.setattr(store_module, "parse_rows", refuse)


@pytest.fixture
def results(tmp_path) -> Path:
    shutil.copy(COMMITTED, tmp_path / "results.csv")
    return tmp_path


def test_a_new_process_reads_the_copy_and_gets_the_same_frame(results, monkeypatch):
    """The committed results, read once (parsed, checked, the copy written), then in a "new process" that may not
    parse them: the same frame, column types and missing values included."""
    _new_process()
    parsed = ResultsStore(results).read()
    assert (results / SIDECAR).is_file()
    _new_process()
    _no_parsing(monkeypatch)
    pd.testing.assert_frame_equal(ResultsStore(results).read(), parsed, check_exact=True)


def test_a_changed_file_is_parsed_again(results):
    """Rows appended after the copy was made, or the file edited in place, are read: the copy is of other bytes."""
    _new_process()
    store = ResultsStore(results)
    before = store.read()
    row = before.iloc[0].to_dict()
    store.append_rows([{**{k: v for k, v in row.items() if pd.notna(v)}, "cell": "new|cell", "config_hash": "c" * 12}],
                      "new|cell", "c" * 12)
    _new_process()
    assert ResultsStore(results).read()["cell"].tolist() == [*before["cell"], "new|cell"]
    text = (results / "results.csv").read_text()
    (results / "results.csv").write_text(text.replace(",ok,", ",error,", 1))  # one row's status, same size
    _new_process()
    assert ResultsStore(results).read()["status"].iloc[0] == "error"


def test_a_copy_of_other_bytes_or_a_damaged_one_is_not_read(tmp_path):
    """A copy made from another file (copied in with a directory, planted) or cut short is ignored: the file is
    parsed, and its rows are the ones returned."""
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, value in ((one, "50.0"), (two, "75.0")):
        folder.mkdir()
        row = {"paper": "A", "model": "m", "method": "none", "task": "passkey", "setting": "20k",
               "metric": "accuracy", "value": value, "n": "10", "status": "ok", "cell": "m|none|passkey|20k",
               "config_hash": "a" * 12, "tau": "1.0"}
        (folder / "results.csv").write_text(HEADER + "\n" + ",".join(row.get(c, "") for c in COLUMNS) + "\n")
        _new_process()
        ResultsStore(folder).read()
    shutil.copy(one / SIDECAR, two / SIDECAR)  # one's copy beside two's file
    _new_process()
    assert ResultsStore(two).read()["value"].tolist() == [75.0]
    data = (two / SIDECAR).read_bytes()
    (two / SIDECAR).write_bytes(data[: len(data) // 2])
    _new_process()
    assert ResultsStore(two).read()["value"].tolist() == [75.0]


def test_no_copy_where_it_cannot_be_written_and_no_write_through_a_link(results, tmp_path_factory):
    """A ``.cache`` that is a link out of the results directory is neither followed nor written; the rows are
    read as before."""
    outside = tmp_path_factory.mktemp("outside")
    (results / ".cache").symlink_to(outside, target_is_directory=True)
    _new_process()
    assert len(ResultsStore(results).read()) > 0
    assert list(outside.iterdir()) == []
