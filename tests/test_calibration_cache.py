"""Algorithm 1's cache holds what τ depends on and describes what it holds (docs/design.md §5, docs/results.md):
every calibration key that changes the examples calibrated on is in the cache key, and a cache whose recorded
key is not the cell's, or that lacks the statistics it was computed from, is set aside and τ computed again."""

from __future__ import annotations

import json

import pytest

from lengthx.core.cells import planned_cells
from lengthx.core.runner import Runner
from lengthx.models.minis import compose_run

pytestmark = pytest.mark.usefixtures("one_thread")

# a cheap Algorithm 1: the Flan-T5 stand-in, one passkey calibration example of 300 tokens
PASSKEY_PMAX = ["model=mini-t5", "task=passkey", "method=pmax", "task.settings=[300]", "task.unit=tokens",
                "task.num_examples=1", "calibration.num_examples=1"]


def _runner(tmp_path, *extra: str) -> Runner:
    return Runner(compose_run([*PASSKEY_PMAX, f"results_dir={tmp_path / 'res'}", *extra]))


@pytest.mark.parametrize("key", ["calibration.seed_offset", "calibration.reference_seed_offset"])
def test_the_calibration_examples_offsets_are_in_the_cache_key(tmp_path, key):
    """Another ``calibration.seed_offset`` (the L_ex examples) or ``calibration.reference_seed_offset`` (the
    L_tr reference) calibrates on other examples, so it names another cache file: τ is not taken from the
    cache of the default offsets."""
    base = _runner(tmp_path)
    cell = planned_cells(base.cfg)[0]
    default_path, default_key = base.calibration_path(cell)
    other_path, other_key = _runner(tmp_path, f"{key}=7").calibration_path(cell)
    assert other_path != default_path
    assert other_key[key.split(".")[1]] == 7 and key.split(".")[1] not in default_key  # default: names kept


def test_a_cache_of_another_model_or_without_its_statistics_is_recomputed(tmp_path, caplog):
    """A cache edited by hand, naming other weights and lacking ``target`` and ``evaluated``, is moved aside with
    a warning naming it, and τ is computed again (the same τ as the first computation)."""
    runner = _runner(tmp_path)
    cell = planned_cells(runner.cfg)[0]
    tau, path, cached = runner.aligned_temperature_with_source(cell)
    assert not cached
    again, _, cached = runner.aligned_temperature_with_source(cell)
    assert cached and again == tau  # a valid cache is used
    edited = json.loads(path.read_text())
    stale = 0.55 if tau != 0.55 else 0.6
    edited.update(weights="0" * 12, tau=stale)
    for name in ("target", "evaluated"):
        edited.pop(name)
    path.write_text(json.dumps(edited))
    with caplog.at_level("WARNING"):
        fresh, _, cached = runner.aligned_temperature_with_source(cell)
    assert not cached and fresh == tau
    assert len(list(path.parent.glob("*.corrupt-*"))) == 1
    assert any(path.name in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_a_cache_recording_another_key_is_recomputed(tmp_path):
    """A cache whose statistics are all there but whose recorded key is another cell's (here: another seed) is
    not used for this cell."""
    runner = _runner(tmp_path)
    cell = planned_cells(runner.cfg)[0]
    tau, path, _ = runner.aligned_temperature_with_source(cell)
    edited = json.loads(path.read_text())
    edited.update(seed=edited["seed"] + 1, tau=0.55 if tau != 0.55 else 0.6)
    path.write_text(json.dumps(edited))
    fresh, _, cached = runner.aligned_temperature_with_source(cell)
    assert not cached and fresh == tau
