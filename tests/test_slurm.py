"""The cluster path through SLURM itself (docs/cluster.md): a one-node slurmctld + slurmd on 127.0.0.1
(scripts/slurm/local_cluster.py), ``hydra/launcher=slurm`` submitting through sbatch, jobs requeued or signalled
mid-cell, and a missing controller. Skipped where slurm-wlm and munge are not installed or not root; `.ci/run`
installs them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import load_script, train_overrides
from safetensors.torch import load_file
from test_faults import _env

from lengthx.core.store import ResultsStore

ROOT = Path(__file__).resolve().parents[1]
LENGTHX = [sys.executable, "-m", "lengthx.cli"]


def _cluster_module():
    return load_script("scripts/slurm/local_cluster.py")


CLUSTER = _cluster_module()
pytestmark = [pytest.mark.skipif(bool(CLUSTER.missing()), reason=f"a local SLURM cluster needs "
                                 f"{', '.join(CLUSTER.missing())} (apt-get install slurm-wlm munge, as root)"),
              pytest.mark.slow, pytest.mark.slurm]

LAUNCHER = ["hydra/launcher=slurm", "hydra.launcher.partition=debug", "hydra.launcher.gpus_per_node=0",
            "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=20",
            "hydra.launcher.signal_delay_s=30"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    CLUSTER.start(root)
    yield root
    CLUSTER.stop(root)
    states = Counter(j.get("JobState", "?") for j in _jobs_seen(root))
    log = (root / "log" / "slurmctld.log").read_text()
    sys.__stderr__.write(f"\nthe controller ran {len(re.findall('sched: Allocate JobId', log))} job starts; its job "
                         f"log: {dict(states)}; requeues: {len(re.findall('Requeuing JobId', log))}\n")


def _lengthx(args: list[str], cluster: Path | None = None, **kw) -> subprocess.CompletedProcess:
    env = _env(**({"SLURM_CONF": str(cluster / "slurm.conf")} if cluster else {}))
    return subprocess.run(LENGTHX + args, capture_output=True, text=True, env=env, timeout=600, **kw)


def _slurm(cluster: Path, *argv: str) -> str:
    env = {**os.environ, "SLURM_CONF": str(cluster / "slurm.conf")}
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=60).stdout


def _rows(results: Path) -> dict[tuple[str, str], tuple[str, str, str]]:
    df = ResultsStore(results).read()
    df = df[df["status"] == "ok"]
    return {(r.cell, r.metric): (f"{float(r.value):.6g}", str(int(r.n)), f"{float(r.tau):.6g}")
            for r in df.itertuples()}


def _records(results: Path) -> dict[str, list[tuple[str, str]]]:
    out = {}
    for path in sorted((results / "records").glob("*.jsonl")):
        recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out[path.name] = sorted((r["id"], json.dumps(r["scores"], sort_keys=True)) for r in recs)
    return out


def _jobs_seen(cluster: Path) -> list[dict[str, str]]:
    """Every job the controller ran to an end (jobcomp/filetxt), as key=value fields."""
    path = cluster / "jobs.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in lines]


SWEEP = ["task=passkey,topics,lines", "method=none,log", "task.unit=tokens", "task.settings=[300]",
         "task.num_examples=2"]


def test_a_sweep_is_one_array_through_sbatch_with_the_rows_of_an_in_process_run(cluster, tmp_path):
    before = len(_jobs_seen(cluster))
    p = _lengthx(["run", "-m", *LAUNCHER, *SWEEP, f"results_dir={tmp_path / 'slurm'}"], cluster)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    said = re.search(r"submitted 6 job\(s\) to slurm: (\d+)_0 … \1_5; their logs: (.+?); results: (\S+) ", p.stdout)
    assert said and said.group(3) == str(tmp_path / "slurm") and "scancel " + said.group(1) in p.stdout, p.stdout
    local = _lengthx(["run", "-m", *SWEEP, f"results_dir={tmp_path / 'local'}"])
    assert local.returncode == 0, local.stderr[-3000:]
    rows = _rows(tmp_path / "slurm")
    assert len({cell for cell, _ in rows}) == 6 and rows == _rows(tmp_path / "local")
    assert _records(tmp_path / "slurm") == _records(tmp_path / "local")
    df = ResultsStore(tmp_path / "slurm").read()
    assert not df.duplicated(["cell", "metric", "config_hash"]).any()  # every cell computed once
    seen = _jobs_seen(cluster)[before:]
    assert len(seen) == 6 and all(j["JobState"] == "COMPLETED" for j in seen), seen
    arrays = {re.search(r"ArrayJobId=(\d+)", line).group(1)
              for line in _slurm(cluster, "scontrol", "show", "job", "-o").splitlines() if "ArrayJobId=" in line}
    assert len(arrays) == 1  # one array of six tasks


SLOW = ["task=passkey", "method=none", "task.unit=tokens", "task.settings=[1500]", "task.num_examples=80"]
SLOW_CELL = "mini-t5|none|passkey|1500tokens"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The slow cell run in this process's way, once: what an interrupted job must end with."""
    results = tmp_path_factory.mktemp("uninterrupted")
    p = _lengthx(["run", *SLOW, f"results_dir={results}"])
    assert p.returncode == 0, p.stderr[-3000:]
    return results


def _wait(ok, what: str, parent: subprocess.Popen, timeout: float = 300) -> None:
    end = time.time() + timeout
    while not ok():
        assert parent.poll() is None, f"the sweep ended before {what}: " + parent.stdout.read()[-3000:]
        assert time.time() < end, f"no {what} within {timeout:.0f} s"
        time.sleep(0.2)


class SlowSweep:
    """The slow cell submitted through SLURM in the background: its parent process, records, job and logs."""

    def __init__(self, cluster: Path, results: Path, *extra: str) -> None:
        self.cluster, self.results = cluster, results
        self.records = results / "records" / "mini-t5_none_passkey_1500tokens.jsonl"
        self.parent = subprocess.Popen(LENGTHX + ["run", "-m", *LAUNCHER, *extra, *SLOW, f"results_dir={results}"],
                                       env=_env(SLURM_CONF=str(cluster / "slurm.conf")), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)

    def done(self) -> int:
        return len(self.records.read_text().splitlines()) if self.records.exists() else 0

    def folder(self) -> Path:
        (folder,) = [d for d in (self.results / ".hydra").glob("multirun_*/.submitit/*") if d.is_dir()]
        return folder

    def starts(self) -> int:
        """How many times the job has started (submitit's log, which SLURM appends to across requeues)."""
        logs = self.folder().glob("*_log.out") if self.done() else []
        return sum(p.read_text().count("Starting with JobEnvironment") for p in logs)

    def act(self, *argv: str) -> None:
        """``argv`` on the job once it has run some examples and is still short of the end (rc 0 from SLURM)."""
        before = self.done()
        _wait(lambda: self.done() >= before + 4, "examples from the job", self.parent)
        assert self.done() < 70, "the job was nearly done before it could be interrupted"
        p = subprocess.run([*argv, self.folder().name], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "SLURM_CONF": str(self.cluster / "slurm.conf")})
        assert p.returncode == 0, p.stderr

    def end(self) -> tuple[int, str]:
        out, _ = self.parent.communicate(timeout=600)
        return self.parent.returncode, out

    def requeued(self) -> int:
        """How often the controller logged this job's requeue."""
        job = self.folder().name.split("_")[0]
        return len(re.findall(rf"Requeuing JobId={job}\b", (self.cluster / "log" / "slurmctld.log").read_text()))


def _resumed_to(sweep: SlowSweep, reference: Path) -> None:
    assert sweep.done() == 80  # each example once: the job resumed where it stopped
    assert _rows(sweep.results) == _rows(reference) and _records(sweep.results) == _records(reference)


def test_a_job_requeued_mid_cell_resumes_to_the_uninterrupted_rows(cluster, tmp_path, uninterrupted):
    """SLURM sends SIGTERM (which submitit's job ignores) and SIGKILL KillWait seconds later; the cluster's KillWait
    is short enough that the first run cannot finish the cell in between, so its result comes from the second."""
    sweep = SlowSweep(cluster, tmp_path / "slurm")
    sweep.act("scontrol", "requeue")
    rc, out = sweep.end()
    assert rc == 0, out[-4000:]
    (log,) = sweep.folder().glob("*_log.out")
    first = log.read_text().split("Starting with JobEnvironment")[1]
    assert "Job completed successfully" not in first, "the first run finished the cell before SLURM killed it"
    assert sweep.requeued() == 1 and sweep.starts() == 2
    _resumed_to(sweep, uninterrupted)


def test_a_job_signalled_as_submitits_preemption_resumes_to_the_uninterrupted_rows(cluster, tmp_path, uninterrupted):
    """``scancel --signal=USR2`` is what SLURM sends signal_delay_s before a preemption or the time limit: submitit
    checkpoints (Hydra's launcher resubmits the same job) and requeues it; the cell resumes from its records."""
    sweep = SlowSweep(cluster, tmp_path / "slurm")
    sweep.act("scancel", "--signal=USR2")
    rc, out = sweep.end()
    assert rc == 0, out[-4000:]
    logs = "".join(p.read_text() for p in sweep.folder().glob("*_log.*"))
    assert "this job is preempted" in logs and sweep.requeued() == 1 and sweep.starts() == 2, logs[-3000:]
    _resumed_to(sweep, uninterrupted)


def test_a_job_timed_out_is_requeued_up_to_max_num_timeout_then_named_and_resumed_by_a_rerun(cluster, tmp_path,
                                                                                          uninterrupted):
    """With timeout_min=5 every signal counts as the time limit's (submitit: past min(0.8 x limit, limit - 10 min)).
    max_num_timeout=1: the first is requeued, the second ends the job; the command names the cell, its log and the
    rerun, exits 1, and the rerun resumes to the uninterrupted rows."""
    results = tmp_path / "slurm"
    sweep = SlowSweep(cluster, results, "hydra.launcher.timeout_min=5", "hydra.launcher.max_num_timeout=1")
    sweep.act("scancel", "--signal=USR2")
    _wait(lambda: sweep.starts() == 2, "second start of the requeued job", sweep.parent)
    sweep.act("scancel", "--signal=USR2")
    rc, out = sweep.end()
    last = out.strip().splitlines()[-1]
    assert rc == 1 and "1 of 1 job(s) of the sweep did not finish" in last and SLOW_CELL in last and "rerun the same command" in last, out[-3000:]
    assert "timed-out too many times" in last and "_log.err" in last and "Traceback" not in last
    assert "submitted 1 job(s) to slurm" in out and sweep.requeued() == 1
    assert 8 <= sweep.done() < 80
    again = _lengthx(["run", "-m", *LAUNCHER, *SLOW, f"results_dir={results}"], cluster)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    _resumed_to(sweep, uninterrupted)


def test_ctrl_c_on_the_waiting_command_cancels_its_jobs_and_a_rerun_resumes(cluster, tmp_path, uninterrupted):
    results = tmp_path / "slurm"
    before = len(_jobs_seen(cluster))
    sweep = SlowSweep(cluster, results)
    _wait(lambda: sweep.done() >= 4, "examples from the job", sweep.parent)
    sweep.parent.send_signal(signal.SIGINT)
    rc, out = sweep.end()
    assert rc == 130 and "cancelled 1 job(s)" in out and "rerun the same command to resume" in out, out[-3000:]
    end = time.time() + 60
    while time.time() < end and len(_jobs_seen(cluster)) == before:
        time.sleep(0.5)
    seen = _jobs_seen(cluster)[before:]
    assert [j["JobState"] for j in seen] == ["CANCELLED"], seen
    assert sweep.done() < 80
    again = _lengthx(["run", "-m", *LAUNCHER, *SLOW, f"results_dir={results}"], cluster)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    _resumed_to(sweep, uninterrupted)


def test_a_training_job_preempted_on_slurm_resumes_to_the_weights_of_an_uninterrupted_run(cluster, models, corpus,
                                                                                           tmp_path):
    """``lengthx train`` as a SLURM job, sent submitit's preemption signal mid-run: it saves the step it reached,
    is requeued by SLURM, and resumes by its run directory (not Hydra's dated folder, which a requeue composes
    afresh) to the same loss curve and weights, bit for bit, as the same training in this process."""
    from lengthx.cli.train import compose_train_config
    from lengthx.segmented.loop import read_curve, train

    steps = {"train.max_steps": 150}
    reference = train(compose_train_config(train_overrides(models, corpus, tmp_path, out="ref", **steps)))
    run = tmp_path / "job"
    parent = subprocess.Popen([*LENGTHX, "train", "-m", *LAUNCHER,
                               *train_overrides(models, corpus, tmp_path, out="job", **steps),
                               f"hydra.sweep.dir={tmp_path / 'sweep'}"], env=_env(SLURM_CONF=str(cluster / "slurm.conf")),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    curve = run / "metrics.jsonl"
    _wait(lambda: curve.exists() and len(curve.read_text().splitlines()) >= 3, "training steps", parent)
    (job,) = [d.name for d in (tmp_path / "sweep" / ".submitit").iterdir() if d.is_dir()]
    _slurm(cluster, "scancel", "--signal=USR2", job)
    out, _ = parent.communicate(timeout=600)
    assert parent.returncode == 0, out[-3000:]
    logs = "".join(p.read_text() for p in (tmp_path / "sweep" / ".submitit").glob("*/*_log.*"))
    resumed = re.search(r"resumed \S+ from step-0*(\d+)", logs)
    assert "this job is preempted" in logs and resumed and 3 <= int(resumed.group(1)) < 150, logs[-3000:]
    assert len(re.findall(rf"Requeuing JobId={job.split('_')[0]}\b",
                          (cluster / "log" / "slurmctld.log").read_text())) == 1
    assert [r["step"] for r in read_curve(run)] == list(range(1, 151))
    assert [r["loss"] for r in read_curve(run)] == [r["loss"] for r in reference.curve]
    wa, wb = load_file(reference.final_dir / "model.safetensors"), load_file(run / "final" / "model.safetensors")
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)


def test_sbatch_without_a_controller_is_one_line_naming_slurm_conf(cluster, tmp_path):
    dead = tmp_path / "slurm.conf"
    dead.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=9", (cluster / "slurm.conf").read_text()))
    env = _env(SLURM_CONF=str(dead))
    p = subprocess.run(LENGTHX + ["run", "-m", *LAUNCHER, "task=passkey", f"results_dir={tmp_path / 'r'}"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 2 and f"SLURM_CONF={dead}" in p.stderr and "Fix:" in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and not (tmp_path / "r" / "results.csv").exists()
