"""lengthx.core.store.merge and scripts/maintenance/merge_stores.py: a store measured elsewhere (a lent GPU's copy) merged into
the store here without two records of one example under one configuration (docs/gpu.md)."""

from __future__ import annotations

import logging
import tarfile
from pathlib import Path

from conftest import load_script

from lengthx.core.store import ResultsStore
from lengthx.core.store.merge import merge_store, merge_tree

ROOT = Path(__file__).resolve().parents[1]
CELL = "m|none|passkey|256tokens"
H = "a" * 12


def _rows(cell: str = CELL, n: int = 2, value: float = 50.0, status: str = "ok", stamp: str = "t1") -> list[dict]:
    base = dict(paper="A", table="4", model="m", method="none", task="passkey", setting=cell.split("|")[-1], n=n,
                status=status, cell=cell, config_hash=H, timestamp=stamp)
    if status != "ok":
        return [{**base, "metric": "accuracy", "value": "", "message": "CUDA out of memory"}]
    return [{**base, "metric": "accuracy", "value": value}, {**base, "metric": "tau", "value": 1.0}]


def _record(i: int, score: float, chash: str = H) -> dict:
    return {"id": f"0-{i}", "index": i, "config_hash": chash, "scores": {"accuracy": score}}


def _store(root: Path, scores: dict[int, float], done: bool, cell: str = CELL) -> ResultsStore:
    store = ResultsStore(root)
    for i, s in scores.items():
        store.append_record(cell, _record(i, s))
    if done:
        store.append_rows(_rows(cell, n=len(scores), value=100 * sum(scores.values()) / len(scores)), cell, H)
    return store


def _scores(store: ResultsStore, cell: str = CELL) -> dict[str, float]:
    return {k: r["scores"]["accuracy"] for k, r in store.load_records(cell).items()}


def test_a_cell_finished_in_the_copy_comes_with_its_records_once(tmp_path):
    here = _store(tmp_path / "here", {0: 1.0, 1: 1.0}, done=True, cell="m|none|passkey|1024tokens")
    _store(tmp_path / "copy", {0: 1.0, 1: 0.0}, done=True)
    report = merge_store(tmp_path / "copy", tmp_path / "here")
    assert (report.cells, report.rows, report.records) == (1, 2, 2)
    assert here.is_done(CELL, H, ["accuracy", "tau"], 2) and _scores(here) == {"0-0": 1.0, "0-1": 0.0}
    assert here.is_done("m|none|passkey|1024tokens", H, ["accuracy", "tau"], 2)
    again = merge_store(tmp_path / "copy", tmp_path / "here")
    assert (again.cells, again.rows, again.records, again.files) == (0, 0, 0, 0)
    assert len(here.read()) == 4


def test_a_partial_run_here_gives_way_to_the_copys_finished_cell(tmp_path, caplog):
    here = _store(tmp_path / "here", {0: 0.0}, done=False)  # one example so far, under the same configuration
    _store(tmp_path / "copy", {0: 1.0, 1: 1.0}, done=True)
    with caplog.at_level(logging.WARNING, logger="lengthx"):
        merge_store(tmp_path / "copy", tmp_path / "here")
        assert _scores(here) == {"0-0": 1.0, "0-1": 1.0}  # the rows' own records, not a mix
    assert "repeats example id" not in caplog.text
    assert float(here.read().query("metric == 'accuracy'").value.iloc[0]) == 100.0


def test_a_cell_done_on_both_sides_stays_as_it_is_here(tmp_path):
    here = _store(tmp_path / "here", {0: 1.0, 1: 1.0}, done=True)
    _store(tmp_path / "copy", {0: 0.0, 1: 1.0}, done=True)
    before = (here.csv_path.read_bytes(), here.records_path(CELL).read_bytes())
    report = merge_store(tmp_path / "copy", tmp_path / "here")
    assert report.cells == report.records == 0
    assert (here.csv_path.read_bytes(), here.records_path(CELL).read_bytes()) == before


def test_a_cell_unfinished_on_both_sides_resumes_with_the_union(tmp_path, caplog):
    here = _store(tmp_path / "here", {0: 0.0}, done=False)
    _store(tmp_path / "copy", {0: 1.0, 1: 1.0, 2: 0.0}, done=False)
    with caplog.at_level(logging.WARNING, logger="lengthx"):
        report = merge_store(tmp_path / "copy", tmp_path / "here")
        assert _scores(here) == {"0-0": 0.0, "0-1": 1.0, "0-2": 0.0}
    assert report.records == 2 and report.cells == 0 and "repeats" not in caplog.text


def test_a_cell_being_computed_here_waits_for_the_next_merge(tmp_path):
    here = _store(tmp_path / "here", {0: 0.0}, done=False)
    _store(tmp_path / "copy", {0: 1.0, 1: 1.0}, done=True)
    with here.cell_lock(CELL):
        report = merge_store(tmp_path / "copy", tmp_path / "here")
    assert report.busy and report.cells == 0 and _scores(here) == {"0-0": 0.0} and "skipped" in report.line()
    assert merge_store(tmp_path / "copy", tmp_path / "here").cells == 1


def test_status_rows_come_once_and_not_beside_a_finished_cell(tmp_path):
    here = _store(tmp_path / "here", {0: 1.0, 1: 1.0}, done=True)
    copy = ResultsStore(tmp_path / "copy")
    copy.append_rows(_rows(status="oom"), CELL, H)  # done here: not brought
    copy.append_rows(_rows("m|none|passkey|7424tokens", status="oom"), "m|none|passkey|7424tokens", H)
    for _ in range(2):
        merge_store(tmp_path / "copy", tmp_path / "here")
    rows = here.read()
    assert list(rows.status).count("oom") == 1 and set(rows[rows.status == "oom"].cell) == {"m|none|passkey|7424tokens"}


def test_calibration_files_are_copied_where_absent_and_kept_where_they_differ(tmp_path):
    _store(tmp_path / "here", {0: 1.0}, done=False)
    _store(tmp_path / "copy", {0: 1.0}, done=False)
    for root, name, text in (("copy", "a.json", "{}"), ("copy", "b.json", '{"tau": 0.7}'), ("here", "b.json", '{"tau": 0.6}')):
        (tmp_path / root / "calibration").mkdir(exist_ok=True)
        (tmp_path / root / "calibration" / name).write_text(text)
    report = merge_store(tmp_path / "copy", tmp_path / "here")
    assert report.files == 1 and report.conflicts == [str(Path("calibration") / "b.json")]
    assert (tmp_path / "here" / "calibration" / "b.json").read_text() == '{"tau": 0.6}'


def test_every_store_of_a_tree_lands_in_its_place(tmp_path):
    _store(tmp_path / "copy" / "seed0" / "step-1", {0: 1.0}, done=True)
    _store(tmp_path / "copy" / "seed0" / "step-1" / "replication", {0: 0.0}, done=True)
    reports = merge_tree(tmp_path / "copy", tmp_path / "here")
    assert set(reports) == {str(Path("seed0/step-1")), str(Path("seed0/step-1/replication"))}
    assert _scores(ResultsStore(tmp_path / "here" / "seed0" / "step-1" / "replication")) == {"0-0": 0.0}


def _script():
    return load_script("scripts/maintenance/merge_stores.py")


def test_the_script_merges_a_calls_archive_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    _store(tmp_path / "copy" / "seed0" / "step-1", {0: 1.0, 1: 1.0}, done=True)
    (tmp_path / "copy" / "logs").mkdir()
    with tarfile.open(tmp_path / "study.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "copy", arcname=".")
    (tmp_path / "here").mkdir()
    script = _script()
    assert script.main([str(tmp_path / "study.tar.gz"), str(tmp_path / "here")]) == 0
    assert ResultsStore(tmp_path / "here" / "seed0" / "step-1").is_done(CELL, H, ["accuracy", "tau"], 2)
    assert "1 cells added" in capsys.readouterr().out
    for args in ([str(tmp_path / "nothing.tar.gz"), str(tmp_path / "here")],
                 [str(tmp_path / "copy" / "logs"), str(tmp_path / "here")],
                 [str(tmp_path / "study.tar.gz"), str(tmp_path / "no-such-folder")]):
        assert script.main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "\n" not in err and "Fix" in err
    (tmp_path / "broken.tar.gz").write_bytes(b"not a tar")
    assert script.main([str(tmp_path / "broken.tar.gz"), str(tmp_path / "here")]) == 2
    assert "not a readable tar archive" in capsys.readouterr().err
