"""Sweeps through Hydra's submitit launcher (docs/design.md §12, docs/results.md "Many workers, one store"): the
SLURM launcher composes as shipped, its mistakes are one line, and real submitit jobs on the local executor
(several processes on one results directory; a training job sent the time-limit signal) give what the same work
gives in this process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import train_overrides
from safetensors.torch import load_file
from test_faults import _env
from test_faults_identity import cli, user_error

from lengthx.cli.launchers import submitit_installed
from lengthx.core.store import ResultsStore

LENGTHX = [sys.executable, "-m", "lengthx.cli"]
needs_submitit = pytest.mark.skipif(not submitit_installed(), reason="the slurm extra (hydra-submitit-launcher) "
                                    "is not installed: pip install -e '.[dev]' installs it")
pytestmark = pytest.mark.usefixtures("one_thread")


@needs_submitit
def test_the_slurm_launcher_composes_with_its_settings():
    """``hydra/launcher=slurm`` is submitit's SLURM launcher with lengthx's defaults (no cluster needed)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from lengthx.config import CONF_DIR, RUN_CONFIG, register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose(RUN_CONFIG, overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.partition, launcher.gpus_per_node, launcher.mem_gb) == ("gpu", 1, 64)
    assert (launcher.timeout_min, launcher.array_parallelism, launcher.max_num_timeout) == (720, 16, 3)


@pytest.mark.parametrize("args,needle", [
    (["hydra/launcher=submitit_local", "task=passkey"], "add -m"),
    (["-m", "hydra/launcher=slurm", "task=passkey"], "hydra.launcher.partition=NAME"),
])
def test_a_launcher_that_cannot_run_is_one_line(args, needle, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    if not submitit_installed():
        needle = "pip install 'lengthx[slurm]'"
    user_error(*cli(["run", *args], capsys, monkeypatch), needle)
    assert list(tmp_path.iterdir()) == []


@needs_submitit
def test_slurm_without_sbatch_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    user_error(*cli(["run", "-m", "hydra/launcher=slurm", "hydra.launcher.partition=gpu"], capsys, monkeypatch),
               "sbatch", "hydra/launcher=submitit_local")


def _ok_rows(results: Path) -> pd.DataFrame:
    df = ResultsStore(results).read()
    cols = ["cell", "metric", "value", "n", "tau", "config_hash"]
    return df[df["status"] == "ok"][cols].sort_values(["cell", "metric"]).reset_index(drop=True)


def _job_lines(sweep: Path) -> list[str]:
    """The summary lines the jobs of a submitit sweep printed (their logs under ``.submitit``)."""
    return [line for log in sorted(sweep.glob(".submitit/*/*_log.out"))
            for line in log.read_text().splitlines() if line.startswith("mini-t5|")]


@needs_submitit
@pytest.mark.slow
def test_six_submitit_jobs_on_overlapping_cells_compute_each_cell_once(tiny_model_dir, tmp_path):
    """Six real submitit jobs (local executor, one process each) sweep overlapping cells into one results
    directory: every cell is computed by one job (the others find it done), no row is lost or doubled, and the
    rows equal those of the same cells run in this process."""
    common = ["task=passkey", "method=none", f"model.path={tiny_model_dir}", "model.l_tr=300",
              "task.num_examples=3", "batch_size=1"]
    orders = "[320,400,480],[400,480,560],[480,560,320],[560,320,400],[320,480,560],[400,560,480]"
    sweep = tmp_path / "sweep"
    p = subprocess.run([*LENGTHX, "run", "-m", "hydra/launcher=submitit_local", *common,
                        f"task.settings={orders}", f"results_dir={tmp_path / 'jobs'}", f"hydra.sweep.dir={sweep}"],
                       capture_output=True, text=True, env=_env(), timeout=400)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    lines = _job_lines(sweep)
    assert len(list(sweep.glob(".submitit/*/*_log.out"))) == 6 and len(lines) == 18, lines
    computed = sorted(line.split()[0] for line in lines if line.split()[1] == "ok")
    assert computed == sorted({line.split()[0] for line in lines}), lines  # each of the 4 cells once
    assert len(computed) == 4
    for records in (tmp_path / "jobs" / "records").glob("*.jsonl"):
        assert len(records.read_text().splitlines()) == 3, records  # each example once
    from lengthx.cli import main

    main(  # the same cells in this process (Hydra's basic launcher)
["run", *common, "task.settings=[320,400,480,560]", f"results_dir={tmp_path / 'here'}",
          f"hydra.run.dir={tmp_path / 'hydra'}"])
    jobs, here = _ok_rows(tmp_path / "jobs"), _ok_rows(tmp_path / "here")
    assert len(jobs) == 8
    pd.testing.assert_frame_equal(jobs, here)


def _submitit_task(parent: int) -> int | None:
    """The PID of the submitit job process (``submitit.core._submit``) below process ``parent``, or None."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append((int(stat.parent.name), cmd))
    todo = [parent]
    while todo:
        for pid, cmd in children.get(todo.pop(), []):
            if "submitit.core._submit" in cmd:
                return pid
            todo.append(pid)
    return None


@needs_submitit
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the job's process in /proc")
def test_a_training_job_sent_the_time_limit_signal_checkpoints_requeues_and_resumes_exactly(models, corpus,
                                                                                           tmp_path):
    """``lengthx train`` under submitit's local executor gets the scheduler's signal mid-run: it saves a
    checkpoint at the step it reached, submitit requeues the job, and the requeued job resumes from it to the
    same weights and loss curve as an uninterrupted run (train.save_every=0: no other checkpoint exists)."""
    from lengthx.cli.train import compose_train_config
    from lengthx.segmented.loop import read_curve, train

    steps = {"train.max_steps": 150}
    reference = train(compose_train_config(train_overrides(models, corpus, tmp_path, out="ref", **steps)))
    run = tmp_path / "job"
    proc = subprocess.Popen([*LENGTHX, "train", "-m", "hydra/launcher=submitit_local",
                             *train_overrides(models, corpus, tmp_path, out="job", **steps),
                             f"hydra.sweep.dir={tmp_path / 'sweep'}"], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline, sent = time.time() + 300, None
    while sent is None and time.time() < deadline and proc.poll() is None:
        curve = run / "metrics.jsonl"
        task = _submitit_task(proc.pid)
        if task is not None and curve.exists() and len(curve.read_text().splitlines()) >= 3:
            os.kill(task, signal.SIGUSR2)
            sent = task
        time.sleep(0.02)
    out, _ = proc.communicate(timeout=300)
    assert sent is not None and proc.returncode == 0, out[-3000:]
    logs = "".join(p.read_text() for p in (tmp_path / "sweep").glob(".submitit/*/*_log.*"))
    assert "SIGUSR2 received" in logs and "Requeued" in logs, logs[-3000:]
    resumed = re.search(r"resumed \S+ from step-0*(\d+)", logs)
    assert resumed and 3 <= int(resumed.group(1)) < 150, logs[-3000:]
    curve = read_curve(run)
    assert [r["step"] for r in curve] == list(range(1, 151))
    assert [r["loss"] for r in curve] == [r["loss"] for r in reference.curve]
    wa, wb = load_file(reference.final_dir / "model.safetensors"), load_file(run / "final" / "model.safetensors")
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)
