"""A non-editable install runs both papers offline from outside the checkout: configs, the shipped minis, the
published tables and paper B's prose corpus are package data (pyproject ``[tool.setuptools.package-data]``), and
the README's Python API example runs on the installed package."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from test_api import assert_example_output, readme_python_api_code

from lengthx.config import PACKAGE_DIR, portable
from lengthx.models.minis import compose_train

ROOT = Path(__file__).resolve().parents[1]


def test_the_prose_corpus_is_package_data_and_keeps_its_hashes():
    """paper B's offline corpus lies in the package, and enters run and cell hashes by the place it had in the
    checkout (corpora/), so the runs and cells made before it moved keep theirs."""
    archive = Path(compose_train(["model=gpt2", "method=ootb"]).data.archive)
    assert archive == PACKAGE_DIR / "corpora" / "debian-prose.tar.xz" and archive.is_file()
    assert portable(str(archive)) == "<checkout>/corpora/debian-prose.tar.xz"
    assert portable(str(PACKAGE_DIR / "checkpoints" / "mini-gpt2")) == "<checkout>/lengthx/checkpoints/mini-gpt2"


def _install(tmp_path: Path) -> Path:
    """The wheel built from this checkout, installed into a fresh virtual environment that takes its
    dependencies (torch, transformers, …) from this one; nothing is downloaded. Returns its python."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(ROOT)], check=True, capture_output=True, text=True, timeout=300)
    wheel = next(wheels.glob("lengthx-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # the dependencies from this environment; its editable lengthx hook is not read, because .pth files inside a
    # directory a .pth adds are not processed
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, text=True, timeout=300)
    return python


@pytest.mark.slow
def test_wheel_install_runs_both_papers_and_the_api_example_outside_the_checkout(tmp_path):
    python = _install(tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LENGTHX_RESULTS", "LENGTHX_CONF",
                                                            "LENGTHX_RUNS")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", LENGTHX_CACHE=str(tmp_path / "cache"))

    def run(*argv: str, timeout: int = 900) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(python), *argv], cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc

    where = run("-c", "import lengthx.api.data as d; print(d.PACKAGE_DIR)").stdout.strip()
    assert not where.startswith(str(ROOT)), where
    assert (Path(where) / "corpora" / "debian-prose.tar.xz").is_file()

    # paper A: a run of the installed mini-t5 with log τ (Algorithm 1 runs in the API example below)
    run("-m", "lengthx.cli", "run", "task=passkey", "method=log", "task.num_examples=2", "task.only=[20k]")
    rows = list(csv.DictReader((work / "results" / "local" / "mini" / "results.csv").open()))
    acc = [r for r in rows if r["metric"] == "accuracy"]
    assert [r["cell"] for r in acc] == ["mini-t5|log|passkey|20k"] and acc[0]["status"] == "ok"
    assert 0.5 < float(acc[0]["tau"]) < 1.0  # log_{L_ex} L_tr

    # paper B: a few steps of domain adaptation of mini-gpt2 on the installed prose corpus
    run("-m", "lengthx.cli", "train", "model=gpt2", "method=ootb", "train.max_steps=3", "train.progress=false")
    (run_dir,) = (work / "runs" / "mini" / "mini-gpt2").iterdir()
    assert run_dir.name.startswith("ootb-1x~")  # its own directory: a budget that is not the profile's
    assert (run_dir / "final" / "lengthx_train.json").is_file()
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    config = json.loads((run_dir / "train_config.json").read_text())["config"]
    assert config["data"]["archive"].startswith(where)  # read from the installed package

    # the README's Python API example
    (work / "example.py").write_text(readme_python_api_code(), encoding="utf-8")
    assert_example_output(run("example.py").stdout)
