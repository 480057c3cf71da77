"""A non-editable install runs the README's main command from outside the checkout: configs, the shipped minis
and the published tables are package data (pyproject ``[tool.setuptools.package-data]``)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_install_runs_passkey_pmax_outside_the_checkout(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(ROOT)], check=True, capture_output=True, text=True, timeout=300)
    wheel = next(wheels.glob("lengthx-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # the dependencies (torch, transformers, …) from this environment; its editable lengthx hook is not read,
    # because .pth files inside a directory a .pth adds are not processed
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, text=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LENGTHX_RESULTS", "LENGTHX_CONF")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    where = subprocess.run([str(python), "-c", "import lengthx; print(lengthx.__file__)"], cwd=work, env=env,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where.startswith(str(site)), where
    run = subprocess.run([str(python), "-m", "lengthx.cli", "run", "task=passkey", "method=pmax",
                          "task.num_examples=2", "task.only=[20k]"], cwd=work, env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = list(csv.DictReader((work / "results" / "local" / "mini" / "results.csv").open()))
    acc = [r for r in rows if r["metric"] == "accuracy"]
    assert [r["cell"] for r in acc] == ["mini-t5|pmax|passkey|20k"] and acc[0]["status"] == "ok"
    assert 0.5 <= float(acc[0]["tau"]) <= 1.0  # Algorithm 1's grid
