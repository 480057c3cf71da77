"""One writer per training run directory, and curves read back in step order (docs/design.md §5): a second
``lengthx train`` into a directory another process is training stops before it touches the run, naming that
process; ``read_training_metrics`` sorts the logged steps."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_train_runs import _base, runs  # noqa: F401 - the fixture

import lengthx
from lengthx.cli import main

# a process that holds a run directory's lock as lengthx train does (an flock on .train.lock with its PID), then
# waits to be ended
HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, str(os.getpid()).encode())
print("held", flush=True)
time.sleep(300)
"""


def test_a_second_writer_stops_naming_the_first(models, corpus, tmp_path, runs, capsys):  # noqa: F811
    """While another process trains the run directory, ``lengthx train`` into it exits 2 with one line naming
    that process's PID and the lock, and writes nothing there."""
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run / ".train.lock")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit) as stop:
            main(["train", *_base(models, corpus, tmp_path), f"train.output_dir={run}", "train.max_steps=2",
                  "train.progress=false"])
        assert stop.value.code == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert f"process {holder.pid}" in err and ".train.lock" in err and "Traceback" not in err
    assert sorted(p.name for p in run.iterdir()) == [".train.lock"]


def test_training_metrics_come_back_in_step_order(tmp_path):
    """A ``metrics.jsonl`` whose lines are out of order (two writers before runs were locked, a file joined by
    hand) is read sorted by step; a torn line is skipped."""
    rows = [{"step": s, "loss": 1.0 / s, "lr": 1e-4, "tokens": 8 * s, "tokens_per_s": 10.0, "seconds": float(s)}
            for s in (4, 2, 6, 1)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 7, "lo')
    df = lengthx.read_training_metrics(tmp_path)
    assert df["step"].tolist() == [1, 2, 4, 6]
    assert df["loss"].tolist() == [1.0, 0.5, 0.25, 1 / 6]
