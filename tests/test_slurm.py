"""The cluster path through SLURM itself (docs/cluster.md): a one-node slurmctld + slurmd on 127.0.0.1
(scripts/slurm/local_cluster.py), ``hydra/launcher=slurm`` submitting through sbatch, jobs requeued or signalled
mid-cell, and a missing controller. Skipped where slurm-wlm and munge are not installed or not root; `.ci/run`
installs them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults import _env

from lengthx.core.store import ResultsStore

ROOT = Path(__file__).resolve().parents[1]
LENGTHX = [sys.executable, "-m", "lengthx.cli"]


def _cluster_module():
    spec = importlib.util.spec_from_file_location("local_cluster", ROOT / "scripts" / "slurm" / "local_cluster.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


SLOW = ["task=passkey", "method=none", "task.unit=tokens", "task.settings=[1500]", "task.num_examples=12"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The slow cell run in this process's way, once: what an interrupted job must end with."""
    results = tmp_path_factory.mktemp("uninterrupted")
    p = _lengthx(["run", *SLOW, f"results_dir={results}"])
    assert p.returncode == 0, p.stderr[-3000:]
    return results


def _interrupted(cluster: Path, tmp_path: Path, action: list[str], reference: Path) -> None:
    """The slow cell through SLURM, ``action`` (on its job id) once some of its examples are on disk; then its rows
    and records against an uninterrupted in-process run."""
    results = tmp_path / "slurm"
    env = _env(SLURM_CONF=str(cluster / "slurm.conf"))
    parent = subprocess.Popen(LENGTHX + ["run", "-m", *LAUNCHER, *SLOW, f"results_dir={results}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    records = results / "records" / "mini-t5_none_passkey_1500tokens.jsonl"
    end = time.time() + 300
    while time.time() < end and not (records.exists() and len(records.read_text().splitlines()) >= 3):
        assert parent.poll() is None, parent.stdout.read()[-3000:]
        time.sleep(0.5)
    (folder,) = [d for d in (results / ".hydra").glob("multirun_*/.submitit/*") if d.is_dir()]  # this sweep's job
    job = folder.name
    _slurm(cluster, *action, job)
    out, _ = parent.communicate(timeout=600)
    assert parent.returncode == 0, out[-4000:]
    assert len(records.read_text().splitlines()) == 12  # each example once: the requeued job resumed
    assert _rows(results) == _rows(reference) and _records(results) == _records(reference)
    log = (cluster / "log" / "slurmctld.log").read_text()
    assert re.search(rf"(requeue|Requeu).*JobId={job.split('_')[0]}|JobId={job.split('_')[0]}.*requeue", log) \
        or "requeue" in log.lower()


def test_a_job_requeued_mid_cell_resumes_to_the_uninterrupted_rows(cluster, tmp_path, uninterrupted):
    _interrupted(cluster, tmp_path, ["scontrol", "requeue"], uninterrupted)


def test_a_job_signalled_as_submitits_preemption_resumes_to_the_uninterrupted_rows(cluster, tmp_path, uninterrupted):
    _interrupted(cluster, tmp_path, ["scancel", "--signal=USR2"], uninterrupted)


def test_sbatch_without_a_controller_is_one_line_naming_slurm_conf(cluster, tmp_path):
    dead = tmp_path / "slurm.conf"
    dead.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=9", (cluster / "slurm.conf").read_text()))
    env = _env(SLURM_CONF=str(dead))
    p = subprocess.run(LENGTHX + ["run", "-m", *LAUNCHER, "task=passkey", f"results_dir={tmp_path / 'r'}"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 2 and f"SLURM_CONF={dead}" in p.stderr and "Fix:" in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and not (tmp_path / "r" / "results.csv").exists()
