"""Committed results that cannot go stale unseen (docs/results.md, "Current rows"): every run records the command
that computed (or found) each cell, ``lengthx tables --check`` composes it again under the current code and
checkpoints, and the tables mark what is no longer current.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import in_process

from lengthx.core.store import ResultsStore
from lengthx.core.store.sources import read_sources

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINTS = ROOT / "lengthx" / "checkpoints"

pytestmark = pytest.mark.usefixtures("one_thread")


def run_command(args: list[str]) -> subprocess.CompletedProcess:
    """``lengthx <args>`` in this process, as its own process would run it (conftest.in_process: what is tested
    is the command's answer, not its process; the imports are paid once)."""
    return in_process(["lengthx", *args], OMP_NUM_THREADS="1")


def _run(model_dir: Path, results: Path, *extra: str) -> None:
    p = run_command(["run", "model=mini-t5", f"model.path={model_dir}", "model.l_tr=256", "task=passkey",
                     "method=none", "task.num_examples=2", "task.settings=[300]", "task.unit=tokens",
                     f"results_dir={results}", *extra])
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]


def _check(results: Path) -> tuple[int, str]:
    p = run_command(["tables", "--check", "--results-dir", str(results)])
    return p.returncode, p.stdout + p.stderr


@pytest.fixture(scope="module")
def computed(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of the shipped mini-t5 and a store with one passkey cell computed from it."""
    tmp = tmp_path_factory.mktemp("currency")
    model = Path(shutil.copytree(CHECKPOINTS / "mini-t5", tmp / "mini-t5"))
    results = tmp / "results"
    _run(model, results)
    return model, results


def test_a_run_records_the_command_of_each_cell(computed):
    _, results = computed
    (cell,) = ResultsStore(results).read()["config_hash"].unique()
    source = read_sources(results)[cell]
    assert source["cell"] == "mini-t5|none|passkey|300tokens"
    assert "task=passkey" in source["overrides"] and "task.unit=tokens" in source["overrides"]


def test_check_passes_on_a_current_store_and_names_a_stale_cell(computed, tmp_path):
    model, results = computed
    status, out = _check(results)
    assert status == 0, out
    assert "1 current, 0 stale" in out
    # the checkpoint's config edited (a value that changes what the model computes): the cell is stale
    edited = Path(shutil.copytree(model, tmp_path / "edited"))
    store = Path(shutil.copytree(results, tmp_path / "store"))
    sources = (store / "sources.jsonl").read_text().replace(str(model), str(edited))
    (store / "sources.jsonl").write_text(sources)
    assert _check(store)[0] == 0  # the same checkpoint at another path is the same cell
    config = json.loads((edited / "config.json").read_text())
    config["layer_norm_epsilon"] = 1e-5
    (edited / "config.json").write_text(json.dumps(config))
    status, out = _check(store)
    assert status == 1, out
    assert "stale: mini-t5|none|passkey|300tokens" in out
    # the tables mark it, never as if current
    p = run_command(["tables", "--summary", "--results-dir", str(store)])
    assert "‡" in p.stdout and "stale" in p.stdout, p.stdout


def test_weights_edited_in_place_make_the_cell_stale(computed, tmp_path):
    model, results = computed
    edited = Path(shutil.copytree(model, tmp_path / "edited"))
    store = Path(shutil.copytree(results, tmp_path / "store"))
    (store / "sources.jsonl").write_text((store / "sources.jsonl").read_text().replace(str(model), str(edited)))
    weights = edited / "model.safetensors"
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(64)
    weights.write_bytes(bytes(data))
    status, out = _check(store)
    assert status == 1 and "stale: mini-t5|none|passkey|300tokens" in out, out


def test_cells_without_a_recorded_command_or_checkpoint_are_unverifiable(computed, tmp_path):
    model, results = computed
    store = Path(shutil.copytree(results, tmp_path / "store"))
    (store / "sources.jsonl").unlink()
    status, out = _check(store)
    assert status == 0 and "unverifiable: 1 cell(s), no record of the command" in out, out
    # rerunning the command finds the cell done and records where it came from
    _run(model, store)
    assert "1 current" in _check(store)[1]
    (store / "sources.jsonl").write_text((store / "sources.jsonl").read_text().replace(str(model), "/nowhere/x"))
    status, out = _check(store)
    assert status == 0 and "its checkpoint /nowhere/x is not in this checkout" in out, out


