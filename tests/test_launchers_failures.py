"""A sweep's jobs that do not finish, through submitit's local executor (docs/cluster.md, "What you see"): a job
killed mid-cell, a training whose job refuses its config. The command names the job and its cells in one line,
exits 1, and the rerun resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import train_overrides
from test_faults import _env
from test_launchers import LENGTHX, _submitit_task, needs_submitit

pytestmark = pytest.mark.usefixtures("one_thread")


@needs_submitit
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the job's process in /proc")
def test_a_job_killed_mid_cell_is_named_by_its_cell_and_a_rerun_resumes_it(tiny_model_dir, tmp_path):
    """A submitit job SIGKILLed mid-cell (the OOM killer, a node lost): the command waits for the sweep's other
    jobs, names the job's cells, its log and the rerun in its last line, exits 1; the rerun resumes the cell and
    keeps each finished example once."""
    args = [*LENGTHX, "run", "-m", "hydra/launcher=submitit_local", "task=passkey", "method=none",
            f"model.path={tiny_model_dir}", "model.l_tr=300", "task.settings=[320]", "task.num_examples=16",
            "batch_size=1", f"results_dir={tmp_path / 'r'}"]
    proc = subprocess.Popen(args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    records = tmp_path / "r" / "records"
    deadline, killed = time.time() + 300, None
    while killed is None and time.time() < deadline and proc.poll() is None:
        task = _submitit_task(proc.pid)
        done = sum(len(p.read_text().splitlines()) for p in records.glob("*.jsonl")) if records.exists() else 0
        if task is not None and 3 <= done < 10:
            os.kill(task, signal.SIGKILL)
            killed = done
        time.sleep(0.05)
    out, _ = proc.communicate(timeout=300)
    assert killed is not None and proc.returncode == 1, out[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("lengthx: 1 of 1 job(s) of the sweep did not finish"), last
    assert "|none|passkey|320tokens" in last and "_log.err" in last and "rerun the same command" in last, last
    assert "submitted 1 job(s) to local" in out and "Traceback" not in out
    again = subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    counts = sorted(len(p.read_text().splitlines()) for p in records.glob("*.jsonl"))
    assert counts == [16]  # each example once, those before the kill kept


@needs_submitit
@pytest.mark.slow
def test_a_training_refused_in_a_launchers_job_is_one_line_naming_it(models, corpus, tmp_path):
    """``lengthx train -m`` whose job refuses its config (a data file that does not exist, found only when the job
    reads it): the waiting command names the job and the refusal in one line, exits 1, no traceback, and the
    refused run leaves no folder behind."""
    missing = tmp_path / "nowhere" / "corpus.txt"
    p = subprocess.run([*LENGTHX, "train", "-m", "hydra/launcher=submitit_local",
                        *train_overrides(models, corpus, tmp_path, out="job"), f"data.files=['{missing}']",
                        f"hydra.sweep.dir={tmp_path / 'sweep'}"], env=_env(), capture_output=True, text=True,
                       timeout=300)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 1 and last.startswith("lengthx train: 1 of 1 job(s) of the sweep failed"), p.stderr[-3000:]
    assert str(missing) in last and "Traceback" not in p.stderr + p.stdout, last
    assert not (tmp_path / "job").exists()
