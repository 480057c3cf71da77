"""The Quickstart (docs/usage.md) fits a coffee break: its commands run slices whose committed timings are about a
minute each (results/bench/quickstart.md, ``scripts/bench/time_quickstart.py``), the README's "First steps" is a few of
them, and a longer run says how long it will take once its first cell is done (the sweep's estimate)."""

from __future__ import annotations

import logging
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from lengthx.core.cells import Cell
from lengthx.core.store import ResultsStore
from lengthx.core.sweep import estimate, row_fields, sweep
from lengthx.tasks import Setting

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

from time_quickstart import quickstart_commands  # noqa: E402


def test_every_quickstart_command_has_a_committed_timing_of_about_a_minute():
    timings = {}
    for line in (ROOT / "results" / "bench" / "quickstart.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `(.+)` \| (\d+) \| (-?\d+) \|", line)
        if m:
            timings[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    commands = quickstart_commands()
    assert len(commands) >= 10 and set(commands) == set(timings), set(commands) ^ set(timings)
    for command in commands:
        seconds, rc = timings[command]
        assert rc == 0, command
        assert seconds <= 90, (command, seconds)  # about a minute on 2 shared cores
        words = shlex.split(command)
        if words[1] in ("run", "calibrate") and "--help" not in words:  # a slice, as `make demo` runs
            assert any(w.startswith("task.only=") for w in words), command


def test_the_readme_first_steps_are_quickstart_commands_and_reach_a_paper_table():
    """The README's "First steps" runs a few of the Quickstart's commands (so each has its committed timing), one
    paper table's column among them, and renders the tables."""
    first = quickstart_commands(ROOT / "README.md", heading="First steps")
    assert 3 <= len(first) <= 8 and set(first) <= set(quickstart_commands()), set(first) - set(quickstart_commands())
    assert "lengthx tables" in first and any(c.startswith("lengthx run task=passkey") for c in first)


def test_the_estimate_scales_the_first_cell_by_length_and_counts_the_sweep(monkeypatch):
    first = Cell("m", "none", "passkey", Setting("20k", 100, "tokens"))
    left = [Cell("m", "none", "passkey", Setting(label, v, "tokens")) for label, v in (("30k", 200), ("40k", 300))]
    monkeypatch.delenv("LENGTHX_SWEEP_JOBS", raising=False)
    assert estimate(first, 10.0, left).endswith("the 2 cell(s) left in this job about 50 s or more")
    monkeypatch.setenv("LENGTHX_SWEEP_JOBS", "3")
    assert estimate(first, 30.0, left).endswith("this sweep has 3 jobs, about 9 min in all if they are alike")


class _Job:
    """Three cells of growing length; the first is already done, the others take a moment each."""

    first_metric = "accuracy"

    def __init__(self, store: ResultsStore):
        self.store = store
        self.all = [(Cell("m", "none", "t", Setting(str(v), v, "tokens")), f"h{v}") for v in (10, 20, 40)]

    def cells(self):
        return self.all

    def is_done(self, cell: Cell, chash: str) -> bool:
        return self.store.is_done(cell.key, chash, ["accuracy"])

    def row_fields(self, cell: Cell, chash: str, start: float) -> dict[str, Any]:
        return row_fields(cell, chash, start, paper="A", table="4", l_tr=10, seed=0, device="cpu")

    def compute(self, cell: Cell, chash: str, start: float) -> list[dict[str, Any]]:
        time.sleep(0.05)
        return [{**self.row_fields(cell, chash, start), "metric": "accuracy", "value": 1.0, "n": 1, "status": "ok"}]


def test_a_sweep_logs_its_estimate_once_after_its_first_computed_cell(tmp_path, caplog, monkeypatch):
    monkeypatch.delenv("LENGTHX_SWEEP_JOBS", raising=False)
    store = ResultsStore(tmp_path)
    job = _Job(store)
    cell, chash = job.all[0]
    store.append_rows(job.compute(cell, chash, time.time()), cell.key, chash)  # done before the sweep
    with caplog.at_level(logging.INFO, logger="lengthx"):
        sweep(store, job)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("estimate:")]
    assert len(lines) == 1 and "first cell (m|none|t|20)" in lines[0] and "the 1 cell(s) left" in lines[0]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lengthx"):
        sweep(store, job)  # everything done: nothing to estimate
    assert not [r for r in caplog.records if r.getMessage().startswith("estimate:")]
