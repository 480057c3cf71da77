"""Nothing is written outside the results or runs directory (docs/results.md, "No write leaves the results
directory"): an empty path, the file-system root or a folder of the lengthx package as ``results_dir``,
``train.output_dir``, ``LENGTHX_RESULTS`` or ``LENGTHX_RUNS`` stops with one line naming it and exit 2, before
Hydra writes its record of the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lengthx.config import PACKAGE_DIR

LENGTHX = [sys.executable, "-m", "lengthx.cli"]


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("LENGTHX_DEBUG", "LENGTHX_RESULTS", "LENGTHX_RUNS")}
    full.update({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **env})
    return subprocess.run(LENGTHX + args, capture_output=True, text=True, env=full, cwd=cwd, timeout=300)


def _one_line(p: subprocess.CompletedProcess, *needles: str) -> str:
    assert p.returncode == 2, (p.stdout + p.stderr)[-3000:]
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("lengthx")]
    assert len(lines) == 1, p.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("args,env,needles", [
    (["results_dir="], {}, ["results_dir=", "empty"]),
    (["results_dir=/"], {}, ["results_dir=/", "root"]),
    ([f"results_dir={PACKAGE_DIR / 'conf'}"], {}, ["results_dir=", "inside the lengthx package"]),
    ([], {"LENGTHX_RESULTS": ""}, ["LENGTHX_RESULTS", "empty", "unset LENGTHX_RESULTS"]),
    ([], {"LENGTHX_RUNS": ""}, ["LENGTHX_RUNS", "empty"]),
])
def test_run_refuses_a_results_place_outside_its_own(tmp_path, args, env, needles):
    """``lengthx run`` (here with ``--dry-run``, which writes nothing by itself) refuses the place before Hydra
    or any work: nothing appears in the working directory."""
    p = _run(["run", "task=passkey", *args, "--dry-run"], tmp_path, **env)
    _one_line(p, *needles)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,env,needles", [
    (["method=ootb"], {"LENGTHX_RUNS": ""}, ["LENGTHX_RUNS", "empty"]),
    (["method=ootb", "train.output_dir=/"], {}, ["train.output_dir=/", "root"]),
    (["method=ootb", f"train.output_dir={PACKAGE_DIR / 'conf' / 'run'}"], {}, ["inside the lengthx package"]),
])
def test_train_refuses_a_runs_place_outside_its_own(tmp_path, args, env, needles):
    """``lengthx train`` refuses an empty ``LENGTHX_RUNS`` (Hydra's record would go to ``/.hydra``, the run to the
    working directory) and a ``train.output_dir`` at ``/`` or in the package, before anything is trained."""
    p = _run(["train", *args, "train.max_steps=1"], tmp_path, **env)
    _one_line(p, *needles)
    assert not (PACKAGE_DIR / "conf" / "run").exists()
