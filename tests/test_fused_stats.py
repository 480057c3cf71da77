"""P_max and entropy from the fused attention pass (lengthx.attention.fused, docs/design.md §9) against the
explicit tiles and the stock explicit softmax."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import tiny_t5
from test_efficient_attention import _batch

from lengthx.attention import fused
from lengthx.attention.stats import AttentionStats, softmax_stats_, stats_from_sums
from lengthx.attention.t5_bias import enable_efficient_t5
from lengthx.attention.temperature import set_temperature
from lengthx.attention.tiled_softmax import offset_view
from lengthx.models.families import get_family

TOL = 1e-5
KERNEL = fused.load()
needs_kernel = pytest.mark.skipif(KERNEL is None, reason="the fused kernel could not be built here (no compiler)")


def _encode(ids: torch.Tensor, mask: torch.Tensor, tau: float, efficient: str,
            row_stride: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encoder output and per-(layer, head) P_max and entropy of a 2-layer random T5 at τ."""
    model = tiny_t5(d_kv=16)  # 4 heads of 16
    enable_efficient_t5(model, mode=efficient)
    modules = get_family("t5").temperature_modules(model, "encoder")
    set_temperature(modules, tau)
    with torch.no_grad(), AttentionStats(modules, row_stride=row_stride) as stats:
        out = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    return out, stats.pmax(), stats.entropy()


def _paths(monkeypatch, ids, mask, tau, row_stride=1):
    """(fused, explicit tiles, stock explicit softmax) results of the same batch, and how often the kernel ran in
    each (once per layer and group of examples that share their valid keys)."""
    calls = []
    real = fused.fused_attention
    monkeypatch.setattr(fused, "fused_attention", lambda *a: calls.append(len(results)) or real(*a))
    results = []
    results.append(_encode(ids, mask, tau, "always", row_stride))
    monkeypatch.setenv(fused.ENV_SWITCH, "0")
    results.append(_encode(ids, mask, tau, "always", row_stride))
    results.append(_encode(ids, mask, tau, "never", row_stride))
    monkeypatch.delenv(fused.ENV_SWITCH)
    return results, [calls.count(i) for i in range(3)]


@needs_kernel
@pytest.mark.parametrize("length,padded,tau", [(300, False, 1.0), (700, True, 0.7), (1100, True, 0.5),
                                               (1100, False, 0.85)])
def test_fused_statistics_equal_the_explicit_paths(monkeypatch, length, padded, tau):
    """Every query row, fp32: output, P_max and entropy of the fused pass equal the explicit tiles' and the stock
    explicit softmax's to 1e-5, at lengths of one to three key blocks, with and without padding."""
    (ours, tiles, stock), calls = _paths(monkeypatch, *_batch(length, padded, size=2)[:2], tau)
    assert calls == [4 if padded else 2, 0, 0]  # 2 layers × 2 key ranges with padding; only in the first run
    for name, ref in (("tiles", tiles), ("stock", stock)):
        for what, a, b in zip(("output", "P_max", "entropy"), ours, ref, strict=True):
            err = (a - b).abs().max().item()
            assert err <= TOL, f"{what} vs {name} at L={length}, padded={padded}, τ={tau}: {err:.2e}"


@needs_kernel
@pytest.mark.parametrize("row_stride", [3, 8])
def test_fused_row_stride_reads_the_sampled_rows(monkeypatch, row_stride):
    """With ``row_stride`` the fused pass keeps every row_stride-th row, the rows the sampled path computes
    explicitly: the same S̄ to 1e-5, and different from every row's (so the stride is really applied)."""
    ids, mask, _ = _batch(900, padded=True, seed=1, size=2)
    (ours, tiles, stock), calls = _paths(monkeypatch, ids, mask, 0.6, row_stride)
    assert calls == [4, 0, 0]
    for ref in (tiles, stock):
        assert (ours[1] - ref[1]).abs().max() <= TOL and (ours[2] - ref[2]).abs().max() <= TOL
    every = _encode(ids, mask, 0.6, "always", 1)
    assert (ours[2] - every[2]).abs().max() > 1e-3


def _kernel_errors(module) -> tuple[float, float, float]:
    """Max |difference| of (output, P_max, entropy) of ``module.fused_attention`` against the explicit softmax on
    random inputs whose row maxima rise across key blocks (scores grow with the key index)."""
    torch.manual_seed(0)
    b, h, n, d = 1, 2, 3 * fused.KV_BLOCK + 37, 16
    q, k, v = torch.randn(b, h, n, d), torch.randn(b, h, n, d), torch.randn(b, h, n, 24)
    k = k + torch.linspace(0, 3, n)[None, None, :, None] * q.mean(2, keepdim=True)  # later keys score higher
    flipped = torch.randn(h, 2 * n - 1)
    out, z, w = q.new_empty(b, h, n, 24), q.new_empty(b, h, n), q.new_empty(b, h, n)
    module.fused_attention(q, k, v, flipped, 0, 0.5, out, z, w, fused.Q_BLOCK, fused.KV_BLOCK)
    s = q @ k.transpose(-1, -2) * 0.5 + offset_view(flipped, n, 0, n, 0, n)[None]
    ref = torch.softmax(s, -1) @ v
    _, _, pmax, entropy = softmax_stats_(s.clone())
    pm, en = stats_from_sums(z, w)
    return ((out - ref).abs().max().item(), (pm - pmax).abs().max().item(), (en - entropy).abs().max().item())


@needs_kernel
def test_the_check_fails_on_a_wrong_accumulator(tmp_path, monkeypatch):
    """The same comparison, run on a copy of the kernel whose entropy accumulator forgets the shift of W when
    the running maximum rises (W' = αW + …, not α(W + (m − m')Z) + …), fails; the real kernel passes it."""
    assert max(_kernel_errors(KERNEL)) <= TOL
    source = fused.SOURCE.read_text()
    right = "w[r] = alpha * (w[r] + (m_old - m_new) * z[r]) + wb;"
    assert source.count(right) == 1
    mutant = tmp_path / "fused_stats.cpp"
    mutant.write_text(source.replace(right, "w[r] = alpha * w[r] + wb;"))
    monkeypatch.setattr(fused, "SOURCE", mutant)
    module = fused._build()
    assert module is not None
    out_err, pmax_err, entropy_err = _kernel_errors(module)
    assert out_err <= TOL and pmax_err <= TOL  # only the entropy accumulator is wrong
    assert entropy_err > 100 * TOL


@needs_kernel
def test_another_checkout_of_the_same_source_reuses_the_compiled_kernel(tmp_path, monkeypatch):
    """The kernel compiles a copy of its source kept in the build directory, so the same source at another
    path (a second clone, a moved checkout) finds the compiled library up to date instead of rebuilding it."""
    from torch.utils.cpp_extension import _get_build_directory

    text = fused.SOURCE.read_bytes()
    name = fused.extension_name(text, fused._capability())
    build = Path(_get_build_directory(name, verbose=False))
    library = build / f"{name}.so"
    assert library.is_file() and (build / fused.SOURCE.name).read_bytes() == text
    assert str(fused.SOURCE) not in (build / "build.ninja").read_text()  # the checkout's path is not compiled
    before = library.stat().st_mtime_ns
    clone = tmp_path / "clone" / "csrc" / fused.SOURCE.name
    clone.parent.mkdir(parents=True)
    clone.write_bytes(text)
    monkeypatch.setattr(fused, "SOURCE", clone)
    assert fused._build() is not None
    assert library.stat().st_mtime_ns == before
    assert str(clone) not in (build / "build.ninja").read_text()


def test_the_fused_kernel_is_skipped_where_it_does_not_apply(monkeypatch):
    """Off by switch, off the CPU's fp32, with dropout or gradients: the explicit tiles compute the statistics."""
    q = torch.zeros(1, 1, 4, 8)
    monkeypatch.setenv(fused.ENV_SWITCH, "0")
    assert not fused.applies(q, 0.0)
    monkeypatch.delenv(fused.ENV_SWITCH)
    assert not fused.applies(q.double(), 0.0)
    assert not fused.applies(q, 0.1)
    with torch.enable_grad():
        assert not fused.applies(q.requires_grad_(), 0.0)
    assert fused.applies(torch.zeros(1, 1, 4, 8), 0.0) == (KERNEL is not None)


def test_a_kernel_that_cannot_be_built_warns_once_and_the_tiles_take_over(tmp_path, monkeypatch, caplog):
    """No kernel (here: its source is missing): one warning that names the reason and the fix, and statistics
    come from the explicit tiles, equal to the stock explicit softmax's."""
    monkeypatch.setattr(fused, "SOURCE", tmp_path / "missing.cpp")
    monkeypatch.setattr(fused, "_STATE", {})
    ids, mask, _ = _batch(300, padded=True, size=2)
    with caplog.at_level("WARNING", logger=fused.__name__):
        ours = _encode(ids, mask, 0.7, "always")
        _encode(ids, mask, 0.7, "always")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "missing.cpp" in warnings[0] and "ninja" in warnings[0]
    assert fused._STATE == {"module": None}
    stock = _encode(ids, mask, 0.7, "never")
    for a, b in zip(ours, stock, strict=True):
        assert (a - b).abs().max() <= TOL
