"""Output, P_max and entropy from the Triton pass over the offset table (lengthx.attention.triton_stats,
docs/design.md §9) against the explicit softmax: on a GPU, or on the CPU in triton's interpreter
(``make test-triton``: TRITON_INTERPRET=1, small shapes). Without triton the kernel's tests are skipped; the
errors that name the fix run everywhere."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import tiny_t5
from test_efficient_attention import _batch
from transformers.models.t5.modeling_t5 import T5Attention

import lengthx.attention
from lengthx.attention import fused, stats_backend, t5_bias
from lengthx.attention.stats import AttentionStats, softmax_stats_, stats_from_sums
from lengthx.attention.t5_bias import enable_efficient_t5
from lengthx.attention.temperature import set_temperature
from lengthx.models.families import get_family

TOL = 1e-5  # fp32 against fp64: what the CPU's fused kernel is held to (tests/test_fused_stats.py)
TAUS = (1.0, 0.85, 0.7, 0.5)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
INTERPRETING = DEVICE.type == "cpu"  # the kernel's tests run here only under TRITON_INTERPRET=1


@pytest.fixture(scope="module")
def kernel() -> types.ModuleType:
    """:mod:`lengthx.attention.triton_stats`, where it can run: on CUDA, or with TRITON_INTERPRET=1 set."""
    pytest.importorskip("triton")
    if DEVICE.type == "cpu" and os.environ.get("TRITON_INTERPRET", "").lower() not in ("1", "true", "on", "yes"):
        pytest.skip("no CUDA here: run with TRITON_INTERPRET=1 (make test-triton)")
    from lengthx.attention import triton_stats

    if not triton_stats.supported(DEVICE):
        pytest.skip("triton_stats was imported before TRITON_INTERPRET was set")
    return triton_stats


def _inputs(dtype: torch.dtype = torch.float32, length: int = 70, seed: int = 0, buckets: bool = False):
    """q, k, v (2, 2, L, 16), an offset table (2, 2L − 1) and a keep mask: example 0 right-padded, example 1
    left-padded with a hole. Later keys score higher (a ramp along q's mean), so a row's maximum rises across
    key blocks and the accumulators' rescaling is exercised. The table is random per offset, or with
    ``buckets`` T5's (16 buckets, max distance 16: every offset beyond ±16 shares its side's bucket)."""
    g = torch.Generator().manual_seed(seed)
    b, h, d = 2, 2, 16
    q, k, v = (torch.randn(b, h, length, d, generator=g) for _ in range(3))
    k = k + torch.linspace(0, 2, length)[None, None, :, None] * q.mean(2, keepdim=True)
    table = 2.0 * torch.randn(h, 2 * length - 1, generator=g)  # T5's block-0 bias at the scale of a trained one
    if buckets:
        offsets = torch.arange(-(length - 1), length)
        ids = T5Attention._relative_position_bucket(offsets, bidirectional=True, num_buckets=16, max_distance=16)
        table = 2.0 * torch.randn(h, 16, generator=g)[:, ids]
    keep = torch.ones(b, length, dtype=torch.bool)
    keep[0, length - length // 3:] = False
    keep[1, : length // 5] = False
    keep[1, length // 2: length // 2 + 3] = False
    return [t.to(DEVICE, dtype) for t in (q, k, v, table)] + [keep.to(DEVICE)]


def _reference(q, k, v, table, keep, tau):
    """The explicit softmax in fp64: s = (q·kᵀ + T[j − i + L − 1])/τ with masked keys at fp64's minimum (T5:
    scaling 1), and P_max and entropy per row by the explicit path's own formula (``softmax_stats_``)."""
    q, k, v, table = (t.double() for t in (q, k, v, table))
    n = q.shape[-2]
    i = torch.arange(n, device=q.device)
    s = (q @ k.transpose(-1, -2) + table[:, i[None, :] - i[:, None] + n - 1]) / tau
    s = s.masked_fill(~keep[:, None, None, :], torch.finfo(torch.float64).min)
    out = torch.softmax(s, -1) @ v
    _, _, pmax, entropy = softmax_stats_(s)
    return out.transpose(1, 2), pmax, entropy


def _errors(module, inputs, tau, row_stride=1):
    """Max |difference| of (output, P_max, entropy) of ``module.attention_stats`` against the fp64 reference."""
    q, k, v, table, keep = inputs
    out, z, w = module.attention_stats(q, k, v, table, 1.0 / tau, 1.0 / tau, keep, row_stride)
    ref_out, ref_pmax, ref_entropy = _reference(q, k, v, table, keep, tau)
    pmax, entropy = stats_from_sums(z, w)
    return ((out.double() - ref_out).abs().max().item(),
            (pmax.double() - ref_pmax[..., ::row_stride]).abs().max().item(),
            (entropy.double() - ref_entropy[..., ::row_stride]).abs().max().item())


@pytest.mark.parametrize("tau", TAUS)
def test_output_and_statistics_equal_the_explicit_softmax(kernel, tau):
    """fp32, every row, with right padding, left padding and a hole: output, P_max and entropy to 1e-5."""
    errors = _errors(kernel, _inputs(), tau)
    for what, err in zip(("output", "P_max", "entropy"), errors, strict=True):
        assert err <= TOL, f"{what} at τ={tau}: {err:.2e}"


def test_row_stride_keeps_every_sth_row_of_the_same_pass(kernel):
    """Z and W of rows 0, S, 2S, … are those of the every-row pass, bit for bit; the output is unchanged."""
    q, k, v, table, keep = _inputs(length=53)
    every = kernel.attention_stats(q, k, v, table, 1 / 0.7, 1 / 0.7, keep, 1)
    strided = kernel.attention_stats(q, k, v, table, 1 / 0.7, 1 / 0.7, keep, 4)
    assert strided[1].shape == (2, 2, 14)
    assert torch.equal(strided[0], every[0])
    assert torch.equal(strided[1], every[1][..., ::4]) and torch.equal(strided[2], every[2][..., ::4])


def test_tiles_in_one_bucket_take_one_bias(kernel):
    """T5's buckets: tiles whose offsets share one table entry add it once instead of gathering it per score
    (``run_ends``); the result is the gathering pass's to the rounding of an fp32 accumulation (a GPU's compiler
    may fuse the bias's multiply-add differently in the two branches: up to 1.7e-6 seen on an H200; the interpreter
    gives the same bits) and the explicit softmax's to 1e-5."""
    q, k, v, table, keep = _inputs(buckets=True)
    ends = kernel.run_ends(table)
    brute = [max(y for y in range(x, table.shape[1]) if torch.equal(table[:, x:y + 1], table[:, x:x + 1].expand(-1,
             y + 1 - x))) for x in range(table.shape[1])]
    assert ends.tolist() == brute and ends[0] >= 69 - 17  # offsets −69 … −17 are one run (bucket of ≤ −16)
    one = kernel.attention_stats(q, k, v, table, 1 / 0.7, 1 / 0.7, keep, 1)
    gathered = kernel.attention_stats(q, k, v, table, 1 / 0.7, 1 / 0.7, keep, 1, runs=False)
    for a, b in zip(one, gathered, strict=True):
        assert torch.equal(a, b) if INTERPRETING else torch.allclose(a, b, rtol=1e-5, atol=1e-5), (a - b).abs().max()
    assert max(_errors(kernel, (q, k, v, table, keep), 0.7)) <= TOL


def test_bf16_inputs_keep_fp32_statistics(kernel):
    """bf16 q, k, v and table against the fp64 softmax of the same (bf16-valued) numbers, τ = 0.7.

    The scores are fp32 sums of exact products of bf16 values (as a GPU's tensor cores take them) and the
    bias is widened before the division by τ, so P_max and entropy carry only fp32 rounding: they are held
    to 1e-4 (the fp32 test's 1e-5, with room for the rounding of 1/τ). The output rounds twice to bf16's
    8-bit significand (relative step 2^-8): the probabilities before the value product and the result, so
    |error| ≤ 2·2^-8·max|v|."""
    q, k, v, table, keep = _inputs(torch.bfloat16)
    out, pmax, entropy = _errors(kernel, (q, k, v, table, keep), 0.7)
    assert pmax <= 1e-4 and entropy <= 1e-4, (pmax, entropy)
    assert out <= 2 * 2**-8 * v.abs().max().item(), out


def _mutant(kernel, tmp_path):
    """A copy of the kernel's module whose W forgets the shift when the running maximum rises
    (W′ = αW + …, not α(W + (m − m′)Z) + …)."""
    source = Path(kernel.__file__).read_text()
    right = "w_i = alpha * (w_i + (m_i - m_new) * z_i) + tl.sum(e * t, 1)"
    assert source.count(right) == 1
    path = tmp_path / "triton_stats_mutant.py"
    path.write_text(source.replace(right, "w_i = alpha * w_i + tl.sum(e * t, 1)"))
    spec = importlib.util.spec_from_file_location("triton_stats_mutant", path)
    mutant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mutant)
    return mutant


def test_the_check_fails_on_a_wrong_accumulator(kernel, tmp_path):
    """The same comparison, run on a copy of the kernel whose W forgets the shift when the running maximum rises
    (:func:`_mutant`), fails on the entropy alone."""
    out, pmax, entropy = _errors(_mutant(kernel, tmp_path), _inputs(), 0.7)
    assert out <= TOL and pmax <= TOL
    assert entropy > 100 * TOL


def _encode(ids, mask, stats_backend: str, row_stride: int, tau: float = 0.7):
    """Encoder output and per-(layer, head) P_max and entropy of a 2-layer random T5 (4 heads of 16) at τ."""
    model = tiny_t5(d_kv=16).to(DEVICE)
    enable_efficient_t5(model, mode="always", stats_backend=stats_backend)
    modules = get_family("t5").temperature_modules(model, "encoder")
    set_temperature(modules, tau)
    with torch.no_grad(), AttentionStats(modules, row_stride=row_stride) as stats:
        out = model.encoder(input_ids=ids.to(DEVICE), attention_mask=mask.to(DEVICE)).last_hidden_state
    return out, stats.pmax(), stats.entropy()


@pytest.mark.parametrize("row_stride", [1, 4])
def test_a_drop_in_for_the_explicit_path(kernel, monkeypatch, row_stride):
    """A T5 encoder with ``stats_backend=triton``, padded batch, τ = 0.7: the encoder output and the S̄ of each
    (layer, head) equal the explicit path's (every row: the explicit tiles; every 4th: the sampled rows) to
    1e-5, with the kernel run once per layer and not at all in the reference."""
    ids, mask, _ = _batch(48, padded=True, size=2)
    calls = []
    real = kernel.attention_stats
    monkeypatch.setattr(kernel, "attention_stats", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    ours = _encode(ids, mask, "triton", row_stride)
    assert len(calls) == 2
    monkeypatch.setenv(fused.ENV_SWITCH, "0")  # the explicit path, not the CPU's fused kernel
    ref = _encode(ids, mask, "blocks", row_stride)
    assert len(calls) == 2
    for what, a, b in zip(("output", "P_max", "entropy"), ours, ref, strict=True):
        assert (a.cpu() - b.cpu()).abs().max() <= TOL, what


@pytest.mark.skipif(not torch.cuda.is_available(), reason="auto takes the pass on CUDA only")
def test_auto_is_the_pass_on_cuda(kernel, monkeypatch):  # pragma: no cover - needs a GPU
    """With no option (``attention.stats_backend=auto``) a CUDA encoder's statistics come from the kernel, once
    per layer, equal to the explicit blocks' (``blocks``) to 1e-5."""
    ids, mask, _ = _batch(48, padded=True, size=2)
    device = torch.zeros(1, device=DEVICE).device  # cuda:N, as the model's tensors name it
    assert stats_backend.use_triton("auto", device)  # the self-check, once, before the kernel's calls are counted
    assert stats_backend.describe(torch.device("cuda")).startswith("the Triton pass on cuda:")
    calls = []
    real = kernel.attention_stats
    monkeypatch.setattr(kernel, "attention_stats", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    ours = _encode(ids, mask, "auto", 1)
    assert len(calls) == 2
    ref = _encode(ids, mask, "blocks", 1)
    assert len(calls) == 2
    for what, a, b in zip(("output", "P_max", "entropy"), ours, ref, strict=True):
        assert (a.cpu() - b.cpu()).abs().max() <= TOL, what


def test_the_self_check_passes_and_catches_a_wrong_kernel(kernel, tmp_path, monkeypatch):
    """``auto``'s self-check on this device: the kernel passes; the mutant whose W forgets the shift (above)
    fails it on the entropy, so ``auto`` would fall back to the blocks."""
    assert stats_backend.self_check(DEVICE) is None
    mutant = _mutant(kernel, tmp_path)
    monkeypatch.setattr(lengthx.attention, "triton_stats", mutant)
    monkeypatch.setitem(sys.modules, "lengthx.attention.triton_stats", mutant)
    reason = stats_backend.self_check(DEVICE)
    assert reason is not None and "entropy" in reason, reason


def test_auto_checks_once_per_device_and_warns_once_when_it_falls_back(monkeypatch):
    """``auto``: never the pass off CUDA (the check is not even run); on CUDA the pass exactly when the device's
    check passes, the check run once per device, and one warning naming ``attention.stats_backend`` when it
    fails. ``triton`` is the pass and ``blocks`` never, without a check."""
    monkeypatch.setattr(stats_backend, "_checked", {})
    checks = []

    def check(reason):
        return lambda device: checks.append(str(device)) or reason

    assert not stats_backend.use_triton("auto", torch.device("cpu"), check(None))
    assert stats_backend.use_triton("triton", torch.device("cpu"), check("x"))
    assert not stats_backend.use_triton("blocks", torch.device("cuda", 0), check(None))
    assert checks == []
    assert stats_backend.use_triton("auto", torch.device("cuda", 0), check(None))
    with pytest.warns(RuntimeWarning, match=r"cuda:1 \(its entropy differs\).*attention.stats_backend=blocks"):
        assert not stats_backend.use_triton("auto", torch.device("cuda", 1), check("its entropy differs"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not stats_backend.use_triton("auto", torch.device("cuda", 1), check(None))
        assert stats_backend.use_triton("auto", torch.device("cuda", 0), check("x"))
    assert checks == ["cuda:0", "cuda:1"]


# ---- asking for it where it cannot run ----------------------------------------------------------------------


def test_without_triton_the_error_names_the_fix(monkeypatch):
    """No triton package: enabling ``stats_backend=triton`` is one ValueError naming the extra and the default."""
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "lengthx.attention.triton_stats", None)
    monkeypatch.delattr(lengthx.attention, "triton_stats", raising=False)
    with pytest.raises(ValueError, match=r"pip install 'lengthx\[gpu\]'.*attention.stats_backend=auto"):
        enable_efficient_t5(tiny_t5(), mode="always", stats_backend="triton")


def test_on_a_device_it_does_not_run_on_the_error_names_the_fix(monkeypatch):
    """A model on a device the kernel does not take (the CPU without the interpreter): the first call with
    statistics is one ValueError naming ``attention.stats_backend=auto``; without statistics nothing changes."""
    monkeypatch.setattr(t5_bias, "triton_kernel", lambda: types.SimpleNamespace(supported=lambda device: False))
    model = tiny_t5()
    enable_efficient_t5(model, mode="always", stats_backend="triton")
    ids, mask, _ = _batch(40, padded=True, size=2)
    with torch.no_grad():
        model.encoder(input_ids=ids, attention_mask=mask)
    modules = get_family("t5").temperature_modules(model, "encoder")
    with torch.no_grad(), AttentionStats(modules), pytest.raises(ValueError, match="attention.stats_backend=auto"):
        model.encoder(input_ids=ids, attention_mask=mask)


def test_the_config_check_refuses_what_cannot_run():
    """Before a run: an unknown value, or triton on the CPU (or without the package), is one ConfigError."""
    pytest.importorskip("pydantic")  # lengthx.cli.validate's schema: not on every bare GPU machine
    from omegaconf import OmegaConf

    from lengthx.cli.validate import ConfigError, check_stats_backend

    for value in ("cuda-please", "triton"):
        cfg = OmegaConf.create({"device": "cpu", "attention": {"stats_backend": value}})
        with pytest.raises(ConfigError, match="attention.stats_backend=auto"):
            check_stats_backend(cfg)
    for value in ("auto", "blocks"):
        check_stats_backend(OmegaConf.create({"device": "cpu", "attention": {"stats_backend": value}}))
