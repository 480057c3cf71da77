"""Attention statistics (paper A Algorithm 1 and Propositions 1-2, DESIGN §5) against naive computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_t5

from lengthx.attention.stats import EXP_FLOOR, AttentionStats, softmax_stats_
from lengthx.attention.t5_efficient import enable_efficient_t5
from lengthx.attention.temperature import set_temperature
from lengthx.models.families import get_family

PATHS = ["temperature", "efficient", "efficient-holes"]


def _padded(length: int = 60, holes: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Three sequences: right-padded, left-padded, full (or, with holes, a gap inside the third)."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 64, (3, length), generator=g)
    mask = torch.ones(3, length, dtype=torch.long)
    mask[0, 41:] = 0
    mask[1, :13] = 0
    if holes:
        mask[2, 20:30] = 0
    ids[mask == 0] = 0
    return ids, mask


def _model(path: str, tau: float = 1.0):
    model = tiny_t5()
    if path.startswith("efficient"):
        enable_efficient_t5(model, mode="always")
    modules = get_family("t5").temperature_modules(model, "encoder")
    if tau != 1.0:
        set_temperature(modules, tau)
    return model, modules


def _reference(model, ids, mask, tau):
    """Hand-written encoder: per-layer probabilities softmax(l/τ + mask) and layer 0's raw logits l."""
    enc = model.encoder
    h = enc.embed_tokens(ids)
    n = ids.shape[1]
    attn0 = enc.block[0].layer[0].SelfAttention
    bias = type(attn0).compute_bias(attn0, n, n)  # stock, even where the efficient path patched it
    add_mask = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    probs, logits0 = [], None
    for block in enc.block:
        sa = block.layer[0].SelfAttention
        x = block.layer[0].layer_norm(h)
        b = x.shape[0]
        q, k, v = (proj(x).view(b, n, sa.n_heads, -1).transpose(1, 2) for proj in (sa.q, sa.k, sa.v))
        logits = q @ k.transpose(-1, -2) + bias
        logits0 = logits if logits0 is None else logits0
        p = (logits / tau + add_mask).softmax(-1)
        probs.append(p)
        h = h + sa.o((p @ v).transpose(1, 2).reshape(b, n, -1))
        h = block.layer[-1](h)
    return probs, logits0


def _naive_means(probs, mask):
    valid = mask.bool()
    pm, en = [], []
    for p in probs:
        pm.append(p.amax(-1).permute(1, 0, 2)[:, valid].mean(-1))
        en.append(torch.special.entr(p).sum(-1).permute(1, 0, 2)[:, valid].mean(-1))
    return torch.stack(pm).double(), torch.stack(en).double()


def test_pmax_entropy_match_eager_attentions():
    """τ = 1: P_max and H per (layer, head) equal those of stock eager T5's output_attentions."""
    ids, mask = _padded()
    eager = tiny_t5(attn="eager")
    with torch.no_grad():
        probs = eager.encoder(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    pm_ref, en_ref = _naive_means(probs, mask)
    for path in ("temperature", "efficient"):
        model, modules = _model(path)
        with torch.no_grad(), AttentionStats(modules) as stats:
            model.encoder(input_ids=ids, attention_mask=mask)
        assert torch.allclose(stats.pmax(), pm_ref, atol=1e-5), path
        assert torch.allclose(stats.entropy(), en_ref, atol=1e-4), path
        assert stats.mean("pmax") == pytest.approx(float(pm_ref.mean()), abs=1e-6)


@pytest.mark.parametrize("path", PATHS)
def test_stats_at_temperature_exclude_padding(path):
    ids, mask = _padded(holes=path.endswith("holes"))
    tau = 0.7
    model, modules = _model(path, tau)
    with torch.no_grad(), AttentionStats(modules) as stats:
        model.encoder(input_ids=ids, attention_mask=mask)
        probs, _ = _reference(model, ids, mask, tau)
    pm_ref, en_ref = _naive_means(probs, mask)
    assert torch.allclose(stats.pmax(), pm_ref, atol=1e-5)
    assert torch.allclose(stats.entropy(), en_ref, atol=1e-4)
    # padded query rows are excluded: the row count is the number of real tokens
    assert stats._rows.tolist() == [float(mask.sum())] * len(modules)
    # and they would change the answer if counted
    all_rows = torch.stack([p.amax(-1).mean((0, 2)) for p in probs]).double()
    assert not torch.allclose(stats.pmax(), all_rows, atol=1e-4)


def _naive_logit_vector(logits0, mask, grid):
    """Sort each valid row over its valid keys, resample to ``grid`` points (np.interp), average, centre."""
    rows = []
    for b in range(logits0.shape[0]):
        keep = mask[b].bool()
        for h in range(logits0.shape[1]):
            for i in torch.nonzero(keep).flatten().tolist():
                row = np.sort(logits0[b, h, i][keep].double().numpy())
                n = row.size
                rows.append(np.interp(np.arange(grid) * (n - 1) / (grid - 1), np.arange(n), row))
    v = np.mean(rows, axis=0)
    return torch.from_numpy(v - v.mean()), len(rows)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("padded", [False, True])
def test_average_logit_vector(path, padded):
    ids, mask = _padded(holes=path.endswith("holes"))
    if not padded:
        mask = torch.ones_like(mask)
    tau = 0.8  # the vector is of the raw logits, whatever τ is in effect
    model, modules = _model(path, tau)
    with torch.no_grad(), AttentionStats(modules, logit_vector=True) as stats:
        model.encoder(input_ids=ids, attention_mask=mask)
        _, logits0 = _reference(model, ids, mask, tau)
    grid = int(mask.sum(-1).max())
    ref, count = _naive_logit_vector(logits0, mask, grid)
    vec = stats.logit_vector()
    assert vec.shape == (grid,) and stats.logit_rows == count
    assert torch.allclose(vec, ref, atol=1e-4)
    assert stats.logit_sigma() == pytest.approx(float(ref.std(correction=0)), abs=1e-4)
    assert stats.logit_lmax() == pytest.approx(float(ref.max()), abs=1e-4)
    assert torch.allclose(stats.logit_vector(tau), ref / tau, atol=1e-4)
    if not padded:  # equal lengths: the plain entry-wise mean of sorted rows, no resampling
        plain = logits0.sort(-1).values.double().mean((0, 1, 2))
        assert torch.allclose(vec, plain - plain.mean(), atol=1e-4)


def test_logit_vector_only_for_layer0_and_qq():
    ids, mask = _padded()
    model, modules = _model("efficient")
    with torch.no_grad(), AttentionStats(modules, logit_vector=True) as stats:
        model.encoder(input_ids=ids, attention_mask=mask)
    assert stats.wants_logits(modules[0]) and not stats.wants_logits(modules[1])
    theo, sample = stats.logit_qq()
    g = sample.numel()
    sigma = stats.logit_sigma()
    expected = sigma * torch.special.ndtri((torch.arange(g, dtype=torch.float64) + 0.5) / g)
    assert torch.allclose(theo, expected) and torch.equal(sample, stats.logit_vector())
    theo10, sample10 = stats.logit_qq(points=10)
    assert theo10.shape == sample10.shape == (10,)
    assert theo10[0] == theo[0] and sample10[-1] == sample[-1]
    with pytest.raises(RuntimeError, match="logit_vector=True"):
        AttentionStats(modules).logit_vector()


def test_softmax_stats_identity():
    """P_max = 1/Z and H = log Z − Σ e(s−m)/Z on masked random scores, against softmax directly."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(2, 3, 5, 40, generator=g) * 3
    s[..., 30:] = torch.finfo(torch.float32).min
    p = s.softmax(-1)
    e, z, pmax, entropy = softmax_stats_(s.clone())
    assert torch.allclose(e / z[..., None], p, atol=1e-6)
    assert torch.allclose(pmax, p.amax(-1), atol=1e-6)
    assert torch.allclose(entropy, torch.special.entr(p).sum(-1), atol=1e-5)
    # a wide score spread yields no denormal weights (they make every later pass many times slower)
    wide, weights = torch.randn(4, 2000, generator=g) * 60, torch.empty(4, 2000)
    softmax_stats_(wide, weights)
    assert bool((weights >= torch.finfo(torch.float32).tiny).all()) and wide.min() >= EXP_FLOOR
