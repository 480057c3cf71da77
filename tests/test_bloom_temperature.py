"""τ in BLOOM's inline-ALiBi attention (docs/design.md §5) against stock transformers and a hand-written reference.

The reference attention is written from the definition, independently of BLOOM's code paths: relative ALiBi
−slope_h·(p_i − p_j) with slopes 2^(−8k/H), scores softmax((QKᵀ/sqrt(d) + alibi)/τ + mask) with a causal and
key-padding mask built from the 2-D attention mask. (Stock BLOOM adds slope_h·p_j instead, which differs by a
constant along each query row, so softmax is the same.)
"""

from __future__ import annotations

import copy
import math
from functools import partial

import numpy as np
import pytest
import torch
from conftest import loaded_model, tiny_bloom

import lengthx.attention.bloom as bloom_attn
from lengthx.alignment.algorithm1 import find_s
from lengthx.attention.bloom import TemperatureBloomAttention, disable_temperature, enable_temperature
from lengthx.attention.stats import AttentionStats
from lengthx.attention.temperature import TAU_ATTR, set_temperature
from lengthx.models.families import get_family
from lengthx.segmented.models import enable_explicit_alibi

HEADS = 4  # tiny_bloom's heads
sharp_bloom = partial(tiny_bloom, sharpen=True)  # attention peaked enough for τ to show


def left_padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two sequences of length 24 and 17 (left padded)."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 64, (2, 24), generator=g)
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, :7] = 0
    ids[1, :7] = 0
    return ids, mask


def _reference_attention(module, hidden, residual, mask2d, positions, tau, record):
    """softmax((QKᵀ/sqrt(d) + alibi)/τ + mask) for one BloomAttention, from its weights only."""
    b, n, _ = hidden.shape
    h, d = module.num_heads, module.head_dim
    qkv = module.query_key_value(hidden).view(b, n, h, 3, d)
    q, k, v = (qkv[..., i, :].transpose(1, 2) for i in range(3))
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)])
    pos = positions.float()
    alibi = -slopes[None, :, None, None] * (pos[:, None, :, None] - pos[:, None, None, :])
    logits = q @ k.transpose(-1, -2) / math.sqrt(d) + alibi
    allowed = torch.ones(n, n).tril().bool()[None, None] & mask2d.bool()[:, None, None, :]
    scores = logits / tau + (~allowed).float() * torch.finfo(torch.float32).min
    probs = torch.softmax(scores, -1)
    record.append((logits, probs))
    ctx = (probs @ v).transpose(1, 2).reshape(b, n, h * d)
    return module.dense(ctx) + residual, None


def reference_logits(model, ids, mask, tau, positions=None, record=None):
    """LM logits of a copy of ``model`` whose every attention is :func:`_reference_attention`."""
    ref = copy.deepcopy(model)
    disable_temperature(ref)
    if positions is None:
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
    record = [] if record is None else record
    for block in ref.transformer.h:
        att = block.self_attention

        def fwd(hidden, residual, *args, _att=att, **kwargs):
            return _reference_attention(_att, hidden, residual, mask, positions, tau, record)

        att.forward = fwd
    with torch.no_grad():
        return ref(input_ids=ids, attention_mask=mask).logits


def logits_of(model, ids, mask, **kwargs):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, **kwargs).logits


def test_family_supports_temperature_and_patches_modules():
    family = get_family("bloom")
    assert family.supports_temperature
    model = sharp_bloom()
    modules = family.temperature_modules(model, "encoder")
    assert len(modules) == 2 and all(type(m) is TemperatureBloomAttention for m in modules)
    assert family.temperature_modules(model, "all") == modules  # idempotent, same modules


def test_tau_one_is_identical_to_stock():
    ids, mask = left_padded_batch()
    stock = sharp_bloom()
    ours = sharp_bloom()
    set_temperature(get_family("bloom").temperature_modules(ours, "all"), 1.0)
    assert torch.equal(logits_of(ours, ids, mask), logits_of(stock, ids, mask))
    assert torch.equal(logits_of(ours, ids, None), logits_of(stock, ids, None))


@pytest.mark.parametrize("tau", [0.6, 1.5])
def test_tau_matches_reference_with_left_padding(tau):
    ids, mask = left_padded_batch()
    model = sharp_bloom()
    set_temperature(get_family("bloom").temperature_modules(model, "all"), tau)
    ours = logits_of(model, ids, mask)
    ref = reference_logits(model, ids, mask, tau)
    valid = mask.bool()
    torch.testing.assert_close(ours[valid], ref[valid], atol=2e-5, rtol=1e-5)
    assert (ours[valid] - logits_of(sharp_bloom(), ids, mask)[valid]).abs().max() > 1e-2  # τ has an effect


def test_query_blocks_give_the_same_result(monkeypatch):
    ids, mask = left_padded_batch()
    model = sharp_bloom()
    set_temperature(get_family("bloom").temperature_modules(model, "all"), 0.8)
    whole = logits_of(model, ids, mask)
    monkeypatch.setattr(bloom_attn, "QUERY_BLOCK", 5)
    torch.testing.assert_close(logits_of(model, ids, mask)[mask.bool()], whole[mask.bool()], atol=1e-6, rtol=0)


def test_per_layer_tau_and_clearing():
    ids, mask = left_padded_batch()
    model = sharp_bloom()
    modules = get_family("bloom").temperature_modules(model, "all")
    set_temperature(modules, [1.0, 0.7])
    assert not torch.equal(logits_of(model, ids, mask), logits_of(sharp_bloom(), ids, mask))
    for m in modules:
        delattr(m, TAU_ATTR)
    assert torch.equal(logits_of(model, ids, mask), logits_of(sharp_bloom(), ids, mask))


def test_works_with_explicit_alibi_positions():
    """Temperature scales the ALiBi built from explicit positions (paper B, segmented_models), in either order."""
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 64, (1, 16), generator=g)
    positions = torch.tensor([[0, 1, 2, 3, 10, 11, 12, 13, 30, 31, 32, 33, 50, 51, 52, 53]])
    mask = torch.ones_like(ids)
    tau = 0.7
    for explicit_first in (True, False):
        model = sharp_bloom()
        if explicit_first:
            enable_explicit_alibi(model)
        modules = enable_temperature(model)
        if not explicit_first:
            enable_explicit_alibi(model)
        set_temperature(modules, tau)
        ours = logits_of(model, ids, mask, position_ids=positions)
        ref = reference_logits(model, ids, mask, tau, positions=positions)
        torch.testing.assert_close(ours, ref, atol=2e-5, rtol=1e-5)
        contiguous = reference_logits(model, ids, mask, tau)
        assert (ours - contiguous).abs().max() > 1e-3  # the gaps matter


def test_backward_through_temperature():
    ids, mask = left_padded_batch()
    model = sharp_bloom().train()
    set_temperature(enable_temperature(model), 0.8)
    out = model(input_ids=ids, attention_mask=mask, labels=ids)
    out.loss.backward()
    assert model.transformer.h[0].self_attention.query_key_value.weight.grad.abs().sum() > 0


def _naive_stats(probs_per_layer, mask):
    """Mean P_max and entropy per (layer, head) over valid query rows, straight from the probabilities."""
    valid = mask.bool()
    pm, en = [], []
    for p in probs_per_layer:
        rows = p.permute(0, 2, 1, 3)[valid]  # (valid rows, H, K)
        pm.append(rows.amax(-1).double().mean(0))
        ent = -(rows * torch.log(rows.clamp_min(1e-30))).sum(-1)
        en.append(ent.double().mean(0))
    return torch.stack(pm), torch.stack(en)


@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_stats_equal_naive_computation(tau):
    ids, mask = left_padded_batch()
    model = sharp_bloom()
    modules = enable_temperature(model)
    set_temperature(modules, tau)
    with AttentionStats(modules) as stats, torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    record: list = []
    reference_logits(model, ids, mask, tau, record=record)
    pmax, entropy = _naive_stats([p for _, p in record], mask)
    torch.testing.assert_close(stats.pmax(), pmax, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(stats.entropy(), entropy, atol=1e-5, rtol=1e-5)


def test_layer0_logit_vector_equals_naive():
    """Average logit vector of layer 0 (Props. 1-2): sort each causal row, resample to the longest row's
    n points by linear interpolation, average, zero-mean; of the raw logits whatever τ is in effect."""
    ids, _ = left_padded_batch()
    ids = ids[:1]
    mask = torch.ones_like(ids)
    model = sharp_bloom()
    modules = enable_temperature(model)
    set_temperature(modules, 0.8)
    with AttentionStats(modules, logit_vector=True) as stats, torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    record: list = []
    reference_logits(model, ids, mask, 0.8, record=record)
    logits0 = record[0][0][0].double()  # (H, L, L) raw logits of layer 0
    n = ids.shape[1]
    grid = torch.arange(n, dtype=torch.float64)
    acc = torch.zeros(n, dtype=torch.float64)
    for head in range(HEADS):
        for i in range(n):
            row = logits0[head, i, : i + 1].sort().values
            xs = torch.arange(i + 1, dtype=torch.float64) * (n - 1) / max(i, 1)
            acc += torch.from_numpy(np.interp(grid.numpy(), xs.numpy(), row.numpy()))
    naive = acc / (HEADS * n)
    naive -= naive.mean()
    assert stats.logit_rows == HEADS * n
    torch.testing.assert_close(stats.logit_vector(), naive, atol=1e-4, rtol=1e-4)


def test_find_s_on_loaded_bloom():
    ids, mask = left_padded_batch()
    model = sharp_bloom()
    loaded = loaded_model(model, "bloom", 24, name="tiny-bloom")
    batch = {"input_ids": ids, "attention_mask": mask}
    s1 = find_s(loaded, [batch], 1.0, "pmax", scope="all")
    s_cold = find_s(loaded, [batch], 0.5, "pmax", scope="all")
    h1 = find_s(loaded, [batch], 1.0, "entropy", scope="all")
    assert s_cold > s1  # a lower temperature sharpens attention
    # S̄ at τ = 1 equals the naive mean over stock BLOOM's own attention probabilities
    with torch.no_grad():
        attn = sharp_bloom()(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    pmax, entropy = _naive_stats(attn, mask)
    assert s1 == pytest.approx(float(pmax.mean()), abs=1e-5)
    assert h1 == pytest.approx(float(entropy.mean()), abs=1e-5)
    assert all(not hasattr(m, TAU_ATTR) for m in loaded.family.temperature_modules(model, "all"))
