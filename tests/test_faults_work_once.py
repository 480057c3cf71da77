"""Fault injection, second round (docs/results.md, docs/design.md §7): work done once. A cell grown from 4 to 10
examples computes 6; a later smaller run never hides a larger one; two processes on one cell compute each example
once; a growing results schema rewrites the header at once.
"""

from __future__ import annotations

import io
import json
import math
import re
import subprocess

import pandas as pd
import pytest
from test_faults import _env
from test_faults_identity import LENGTHX, _ok_rows, _overrides, _runner

from lengthx.core.store import COLUMNS, ResultsStore

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- work done once -------------------------------------------------------------------------------------------
def test_ten_examples_after_four_compute_six(tiny_model_dir, tmp_path, monkeypatch):
    import lengthx.core.runner as runner_module

    res = tmp_path / "res"
    assert [s["n"] for s in _runner(tiny_model_dir, res, n=4).run()] == [4]
    real, generated = runner_module.generate, []

    def spy(loaded, prompts, *args, **kwargs):
        generated.extend(prompts)
        return real(loaded, prompts, *args, **kwargs)

    monkeypatch.setattr(runner_module, "generate", spy)
    assert [s["n"] for s in _runner(tiny_model_dir, res, n=10).run()] == [10]
    assert len(generated) == 6
    path, = (res / "records").glob("*.jsonl")
    ids = [json.loads(x)["id"] for x in path.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 10
    generated.clear()
    assert [s["status"] for s in _runner(tiny_model_dir, res, n=3).run()] == ["done"] and not generated


def test_a_later_smaller_run_never_hides_a_larger_one(tiny_model_dir, tmp_path):
    """A 1-example run after a finished 10-example one is done; rows appended by an older version for both (the
    1-example run last) still render the 10-example value, with n, in the tables and the summary."""
    from lengthx.report.tables import TABLES
    from lengthx.report.tables.render import render
    from lengthx.report.tables.summary import summary_markdown

    res = tmp_path / "res"
    _runner(tiny_model_dir, res, n=10).run()
    assert [s["status"] for s in _runner(tiny_model_dir, res, n=1).run()] == ["done"]
    csv = res / "results.csv"
    lines = csv.read_text().splitlines(keepends=True)
    n, value, stamp = COLUMNS.index("n"), COLUMNS.index("value"), COLUMNS.index("timestamp")
    older = []
    for line in lines[1:]:  # the same rows with n=1, a value of 100 and a later time, as old code appended
        row = line.rstrip("\n").split(",")
        row[n], row[stamp] = "1", "2999-01-01T00:00:00"
        if row[COLUMNS.index("metric")] == "accuracy":
            row[value] = "100.0"
        older.append(",".join(row) + "\n")
    csv.write_text("".join(lines + older))
    store = ResultsStore(res)
    df = store.read()
    summary = summary_markdown(df)
    assert "(n=10)" in summary and "100" not in summary
    md = render(TABLES["aa_table4"], df, store=store).markdown  # its 320-token cell fills no column of Table 4
    assert not re.search(r"n = 1\b", md) and "(n=1)" not in md and "| 100" not in md


def test_two_processes_on_one_cell_compute_each_example_once(tiny_model_dir, tmp_path):
    """Two real processes start the same cell at once: one computes it, the other waits and finds it done."""
    res = tmp_path / "res"
    n = 24
    args = [*LENGTHX, "run", *_overrides(tiny_model_dir, res, n=n)]
    procs = [subprocess.Popen(args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    status = sorted(line.split()[1] for out, _ in outs for line in out.splitlines() if line.startswith("mini-t5|"))
    assert status == ["done", "ok"]
    path, = (res / "records").glob("*.jsonl")
    assert len(path.read_text().splitlines()) == n  # each example once
    assert len(_ok_rows(res)) == 2


def test_a_growing_schema_rewrites_the_header_at_once(tmp_path):
    """A results file with the older header (no data column) gets the current header, every older row an empty
    field, in one rename when a row of the current schema is written: pandas reads it whole."""
    store = ResultsStore(tmp_path)
    legacy = [COLUMNS[:-1], ["A", "4", "m", "none", "passkey", "5", "accuracy", "1.0", "1", "1.0"]
              + [""] * 4 + ["ok", "", "m|none|passkey|5", "h", "c", "v", "cpu", "1", "t"]]
    store.csv_path.write_text("\n".join(",".join(r) for r in legacy) + "\n")
    inode = store.csv_path.stat().st_ino
    row = {"paper": "A", "model": "m", "method": "none", "task": "passkey", "setting": "6", "metric": "accuracy",
           "value": 1.0, "n": 1, "status": "ok", "cell": "m|none|passkey|6", "config_hash": "h", "data": "synthetic"}
    assert store.append_rows([row], row["cell"], "h")
    assert store.csv_path.stat().st_ino != inode  # replaced by a rename, not rewritten in place
    df = pd.read_csv(store.csv_path)
    assert list(df.columns) == COLUMNS and len(df) == 2 and df["data"].tolist()[1] == "synthetic"
    assert math.isnan(df["data"].tolist()[0])
    assert io.StringIO(store.csv_path.read_text()).readline().strip() == ",".join(COLUMNS)
