"""Attention statistics (paper A Algorithm 1 and Propositions 1-2, docs/design.md §5) against naive computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_t5

from lengthx.attention import fused, tiled_softmax
from lengthx.attention.stats import (
    EXP_FLOOR,
    AttentionStats,
    row_dot,
    softmax_stats_,
    softmax_sums_,
    stats_from_sums,
)
from lengthx.attention.t5_bias import RelativeBiasTable, enable_efficient_t5
from lengthx.attention.temperature import AttentionCall, set_temperature
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fused_entropy_matches_naive_softmax(dtype):
    """The in-place pass of the explicit path (e in place, s − m in a scratch buffer, Σ e·(s − m) as a fused
    row dot) gives −Σ p log p and max p of a naive float64 softmax, on random blocks with masked keys
    (additive finfo.min and −inf), a wide score spread, and fp16/bf16 scores taken to fp32 as the path does;
    filling a block chunk by chunk through the out= buffers gives the same sums as one call."""
    g = torch.Generator().manual_seed(5)
    s = (torch.randn(3, 7, 300, generator=g) * torch.tensor([1.0, 8.0, 40.0])[:, None, None]).to(dtype)
    s[0, :, 250:] = torch.finfo(dtype).min  # additive padding mask
    s[1, 2:5, ::3] = -torch.inf  # masked keys at −inf
    s32 = s.float()
    p = torch.softmax(s32.double(), -1)
    naive_entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    scratch = torch.empty_like(s32)
    e, z, w = softmax_sums_(x := s32.clone(), scratch)
    assert e.data_ptr() == x.data_ptr()  # the probabilities are left in place, like the plain softmax
    pmax, entropy = stats_from_sums(z, w)
    assert torch.allclose((e / z[..., None]).double(), p, atol=1e-6)
    assert torch.allclose(pmax.double(), p.amax(-1), atol=1e-6)
    assert torch.allclose(entropy.double(), naive_entropy, atol=2e-5, rtol=1e-5)
    # the denormal guard: every weight is a normal number, every shifted score at or above the floor
    assert bool((e >= torch.finfo(torch.float32).tiny).all()) and scratch.min() >= EXP_FLOOR
    # the same numbers as softmax_stats_ (out of place, used by the autograd path)
    e2, z2, pmax2, entropy2 = softmax_stats_(s32.clone())
    assert torch.equal(e2, e) and torch.equal(z2, z) and torch.allclose(entropy2, entropy, atol=1e-6)
    # chunk by chunk into preallocated row buffers
    rows = s32.reshape(-1, 300)
    zc, wc, tc = torch.empty(rows.shape[0]), torch.empty(rows.shape[0]), torch.empty(4, 300)
    xc = rows.clone()
    for c0 in range(0, rows.shape[0], 4):
        c1 = min(c0 + 4, rows.shape[0])
        softmax_sums_(xc[c0:c1], tc[: c1 - c0], zc[c0:c1], wc[c0:c1])
    assert torch.equal(xc, e.reshape(-1, 300)) and torch.equal(zc, z.reshape(-1))
    assert torch.allclose(wc, w.reshape(-1), rtol=1e-6, atol=1e-6)


def test_row_dot_paths():
    """The NumPy fast path, its out= form and the torch fallbacks (half precision, autograd) agree."""
    g = torch.Generator().manual_seed(6)
    a, b = torch.randn(3, 4, 1000, generator=g), torch.rand(3, 4, 1000, generator=g)
    ref = (a.double() * b.double()).sum(-1)
    assert torch.allclose(row_dot(a, b).double(), ref, rtol=1e-5, atol=1e-4)
    out = torch.empty(3, 4)
    assert row_dot(a, b, out=out) is out and torch.allclose(out.double(), ref, rtol=1e-5, atol=1e-4)
    assert torch.allclose(row_dot(a.half(), b.half()).double(), ref, rtol=1e-2, atol=0.5)
    ag = a.clone().requires_grad_()
    row_dot(ag, b).sum().backward()
    assert torch.allclose(ag.grad, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("holes", [False, True])
def test_chunked_explicit_path_stats(monkeypatch, dtype, holes):
    """Tiles of a few rows, split into chunks of one or two rows (the CPU layout at long lengths): the
    statistics match the naive reference, and capturing them leaves the attention output bit-identical."""
    monkeypatch.setattr(tiled_softmax, "BLOCK_ELEMENTS", 5 * 60)
    monkeypatch.setattr(tiled_softmax, "MIN_BLOCK_ROWS", 5)
    monkeypatch.setattr(tiled_softmax, "CHUNK_ELEMENTS", 2 * 60 - 1)
    monkeypatch.setenv(fused.ENV_SWITCH, "0")  # the tiles themselves, not the fused kernel
    ids, mask = _padded(holes=holes)
    tau = 0.8
    model = tiny_t5().to(dtype)
    enable_efficient_t5(model, mode="always", backend="explicit")  # the explicit path also without stats
    modules = get_family("t5").temperature_modules(model, "encoder")
    set_temperature(modules, tau)
    with torch.no_grad():
        plain = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        with AttentionStats(modules) as stats:
            captured = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        probs, _ = _reference(model.float(), ids, mask, tau)
    assert torch.equal(plain, captured)
    pm_ref, en_ref = _naive_means(probs, mask)
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    assert torch.allclose(stats.pmax(), pm_ref, atol=tol)
    assert torch.allclose(stats.entropy(), en_ref, atol=10 * tol)


@pytest.mark.parametrize("with_stats", [False, True])
def test_explicit_path_row_dependent_mask(monkeypatch, with_stats):
    """A mask that differs between query rows (not a padding mask) is added chunk by chunk with the right
    rows: the output and the statistics equal a naive softmax((QKᵀ·scaling + bias)/τ + mask)·V."""
    monkeypatch.setattr(tiled_softmax, "BLOCK_ELEMENTS", 4 * 23)
    monkeypatch.setattr(tiled_softmax, "MIN_BLOCK_ROWS", 4)
    monkeypatch.setattr(tiled_softmax, "CHUNK_ELEMENTS", 2 * 23)
    g = torch.Generator().manual_seed(7)
    b, h, n, d, tau = 2, 3, 23, 8, 0.9
    q, k, v = (torch.randn(b, h, n, d, generator=g) for _ in range(3))
    table = torch.randn(h, 2 * n - 1, generator=g) * 2
    keep = (torch.rand(b, 1, n, n, generator=g) > 0.4) | torch.eye(n, dtype=torch.bool)  # own key kept
    mask = torch.zeros(b, 1, n, n).masked_fill(~keep, torch.finfo(torch.float32).min)
    module = torch.nn.Module().eval()
    stats = AttentionStats([module]) if with_stats else None
    out = RelativeBiasTable(table, n, n, backend="explicit").attend(
        AttentionCall(module, q, k, v, mask, scaling=0.5, tau=tau, stats=stats))
    dense = RelativeBiasTable(table, n, n).dense()
    p = torch.softmax((q @ k.transpose(-1, -2) * 0.5 + dense) / tau + mask, -1)
    assert torch.allclose(out, (p @ v).transpose(1, 2), atol=1e-5)
    if with_stats:
        assert torch.allclose(stats.pmax()[0], p.amax(-1).mean((0, 2)).double(), atol=1e-6)
        assert torch.allclose(stats.entropy()[0], torch.special.entr(p).sum(-1).mean((0, 2)).double(), atol=1e-5)
