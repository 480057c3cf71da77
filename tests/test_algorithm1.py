"""Algorithm 1 on small T5 models: brute force, bisection vs grid, per-layer, the calibration cache."""

from __future__ import annotations

import pytest
import torch
from conftest import loaded_model, tiny_t5
from omegaconf import OmegaConf

from lengthx.alignment.algorithm1 import (
    TEMPERATURE_GRID,
    CalibrationOptions,
    calibrate,
    calibrate_per_layer,
    find_s,
)
from lengthx.models import LoadedModel


def _loaded(seed: int) -> LoadedModel:
    return loaded_model(tiny_t5(seed=seed, vocab_size=128, d_model=32, num_heads=4, d_kv=8), "t5", 64)


def _batches(length: int, n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(3, 128, (1, length), generator=g)
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return out


@pytest.mark.parametrize("mode", ["pmax", "entropy"])
def test_grid_choice_is_the_brute_force_closest(mode):
    loaded = _loaded(0)
    ref, ext = _batches(64, 2, 1), _batches(512, 2, 2)
    result = calibrate(loaded, ref, ext, CalibrationOptions(mode))
    target = find_s(loaded, ref, 1.0, mode)
    brute = {t: find_s(loaded, ext, t, mode) for t in TEMPERATURE_GRID}
    best = min(TEMPERATURE_GRID, key=lambda t: abs(brute[t] - target))
    assert result.tau == best and result.target == pytest.approx(target)
    assert result.evaluated == pytest.approx(brute)
    # dispersal: at τ = 1 the long input is flatter than the short one
    assert (brute[1.0] < target) if mode == "pmax" else (brute[1.0] > target)


@pytest.mark.slow
def test_bisection_agrees_with_grid_on_seeded_models():
    agree, passes_grid, passes_bisect = 0, 0, 0
    for seed, length in zip(range(10), [256, 384, 512, 640, 768] * 2, strict=True):
        loaded = _loaded(100 + seed)
        ref, ext = _batches(64, 1, seed), _batches(length, 1, 50 + seed)
        g = calibrate(loaded, ref, ext, CalibrationOptions("pmax", search="grid"))
        b = calibrate(loaded, ref, ext, CalibrationOptions("pmax", search="bisect"))
        agree += g.tau == b.tau
        passes_grid += g.forward_passes
        passes_bisect += b.forward_passes
        assert b.forward_passes <= g.forward_passes / 2
    assert agree >= 9


def test_per_layer_alignment_returns_one_tau_per_layer():
    loaded = _loaded(3)
    ref, ext = _batches(64, 1, 1), _batches(512, 1, 2)
    layers = calibrate_per_layer(loaded, ref, ext, CalibrationOptions("pmax"))
    assert len(layers) == len(loaded.model.encoder.block)
    assert all(r.tau in TEMPERATURE_GRID for r in layers)
    # layer 0 sees only its own τ: its per-layer choice is Algorithm 1 restricted to layer 0's statistic
    from lengthx.alignment.statistics import capture_stats

    l0 = {t: float(capture_stats(loaded, ext, [t, 1.0]).pmax()[0].mean()) for t in TEMPERATURE_GRID}
    target0 = float(capture_stats(loaded, ref, 1.0).pmax()[0].mean())
    assert layers[0].tau == min(TEMPERATURE_GRID, key=lambda t: abs(l0[t] - target0))


def test_calibrate_second_call_is_served_from_cache(tiny_model_dir, tmp_path):
    from hydra import compose, initialize_config_dir

    from lengthx.config import CONF_DIR, register_resolvers
    from lengthx.core.cells import Cell, method_id
    from lengthx.core.runner import Runner

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("run", overrides=[
            "method=pmax", f"model.path={tiny_model_dir}", "model.l_tr=300", "task.settings=[400]",
            f"results_dir={tmp_path}", "calibration.num_examples=1"])
    runner = Runner(cfg)
    calls = []
    runner.loaded.model.encoder.register_forward_hook(lambda *a: calls.append(1))
    cell = Cell(cfg.model.name, method_id(cfg.method), "passkey", runner.settings()[0])
    tau1, path, cached1 = runner.aligned_temperature_with_source(cell)
    assert not cached1 and path.exists() and len(calls) == 1 + 11  # reference + the grid
    calls.clear()
    tau2, _, cached2 = runner.aligned_temperature_with_source(cell)
    assert cached2 and tau2 == tau1 and calls == []
    assert OmegaConf.to_container(cfg.method)["search"] == "grid"


@pytest.mark.parametrize("efficient", ["never", "always"])
def test_row_sampled_statistics_equal_naive_on_those_rows(efficient):
    """``row_stride`` statistics are exactly P_max/H of every n-th valid query row (naive from eager T5)."""
    from lengthx.alignment.statistics import capture_stats
    from lengthx.attention.t5_bias import enable_efficient_t5

    loaded = _loaded(7)
    enable_efficient_t5(loaded.model, mode=efficient)
    eager = tiny_t5(seed=7, attn="eager", vocab_size=128, d_model=32, num_heads=4, d_kv=8)
    ids = torch.randint(3, 128, (2, 90), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 61:] = 0
    batch = [{"input_ids": ids, "attention_mask": mask}]
    stride = 4
    stats = capture_stats(loaded, batch, 1.0, row_stride=stride)
    with torch.no_grad():
        out = eager.encoder(input_ids=ids, attention_mask=mask, output_attentions=True)
    layers = len(out.attentions)
    pm, en = torch.zeros(layers, 4, dtype=torch.float64), torch.zeros(layers, 4, dtype=torch.float64)
    count = sum(1 for b in range(2) for r in range(0, 90, stride) if mask[b, r])
    for layer, att in enumerate(out.attentions):
        for b in range(2):
            p = att[b][:, [r for r in range(0, 90, stride) if mask[b, r]]].double()
            pm[layer] += p.amax(-1).sum(-1)
            en[layer] += torch.special.entr(p).sum(-1).sum(-1)
    assert torch.allclose(stats.pmax(), pm / count, atol=1e-5)
    assert torch.allclose(stats.entropy(), en / count, atol=1e-4)
    # at τ ≠ 1 the sampled rows estimate the all-rows statistic closely
    sampled, full = capture_stats(loaded, batch, 0.7, row_stride=stride), capture_stats(loaded, batch, 0.7)
    assert abs(sampled.mean("pmax") - full.mean("pmax")) < 0.03
    assert abs(sampled.mean("pmax") - stats.mean("pmax")) > 0.01  # τ really applied on the sampled path
