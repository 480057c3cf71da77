"""Memory-efficient T5 encoder attention (docs/design.md §9) against stock transformers."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_t5

from lengthx.attention.stats import AttentionStats
from lengthx.attention.t5_bias import (
    SETTINGS_ATTR,
    RelativeBiasTable,
    disable_efficient_t5,
    efficient_t5_settings,
    enable_efficient_t5,
    relative_bias_table,
    resolve_backend,
)
from lengthx.attention.temperature import set_temperature
from lengthx.attention.tiled_softmax import BLOCK_ELEMENTS
from lengthx.models.families import get_family

TOL = 1e-4


def _batch(
    length: int, padded: bool, seed: int = 0, size: int = 3
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``size`` sequences of ``length`` tokens; padded: the first right-padded, the second left-padded."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 64, (size, length), generator=g)
    mask = torch.ones(size, length, dtype=torch.long)
    if padded:
        mask[0, length - length // 3:] = 0
        mask[1, : length // 5] = 0
        ids[mask == 0] = 0
    return ids, mask, torch.randint(3, 64, (size, 5), generator=g)


def _logits(model, ids, mask, dec) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits


@pytest.fixture(scope="module")
def stock_models():
    return {"sdpa": tiny_t5(attn="sdpa"), "eager": tiny_t5(attn="eager")}


def test_offset_table_matches_stock_bias():
    attn = tiny_t5().encoder.block[0].layer[0].SelfAttention
    for q_len, k_len in [(37, 37), (5, 9), (300, 300)]:
        with torch.no_grad():
            table = relative_bias_table(attn, q_len, k_len)
            stock = attn.compute_bias(q_len, k_len)
        assert table.shape == (attn.n_heads, q_len + k_len - 1)
        obj = RelativeBiasTable(table, q_len, k_len)
        assert torch.equal(obj.dense(), stock)
        # the zero-copy view of the flipped table is the stock bias with keys reversed
        flipped = obj.flipped(1.0, table.dtype, table.device)
        view = obj.view(flipped, 2, q_len, 1, k_len - 1)
        assert view.untyped_storage().data_ptr() == flipped.untyped_storage().data_ptr()
        assert torch.equal(view, stock[0, :, 2:, 1:k_len - 1].flip(-1))


@pytest.mark.parametrize("length", [100, 700, 1500])
@pytest.mark.parametrize("padded", [False, True])
def test_logits_match_stock(stock_models, length, padded):
    ids, mask, dec = _batch(length, padded, size=3 if length < 1000 else 2)
    refs = {name: _logits(m, ids, mask, dec) for name, m in stock_models.items()}
    for backend in ("sdpa", "explicit"):
        model = tiny_t5()
        enable_efficient_t5(model, mode="always", backend=backend)
        ours = _logits(model, ids, mask, dec)
        for name, ref in refs.items():
            err = (ours - ref).abs().max().item()
            assert err <= TOL, f"{backend} vs stock {name} at L={length}, padded={padded}: {err:.2e}"


def test_mask_with_holes_uses_masked_path(stock_models):
    """Valid keys that are not one contiguous range per example take the blockwise masked path."""
    ids, mask, dec = _batch(300, padded=True)
    mask[2, 100:140] = 0
    ref = _logits(stock_models["eager"], ids, mask, dec)
    model = tiny_t5()
    enable_efficient_t5(model, mode="always", backend="sdpa")
    assert (_logits(model, ids, mask, dec) - ref).abs().max().item() <= TOL


@pytest.mark.parametrize("backend", ["sdpa", "explicit"])
def test_temperature_matches_explicit_path(backend):
    ids, mask, dec = _batch(400, padded=True)
    ours, ref, stock = tiny_t5(), tiny_t5(), tiny_t5()
    enable_efficient_t5(ours, mode="always", backend=backend)
    for m in (ours, ref):
        set_temperature(get_family("t5").temperature_modules(m, "encoder"), 0.6)
    out, expected = _logits(ours, ids, mask, dec), _logits(ref, ids, mask, dec)  # ref: temperature.py's path
    assert (out - expected).abs().max().item() <= TOL
    assert (out - _logits(stock, ids, mask, dec)).abs().max().item() > 1e-2  # τ really acts


def test_decoder_untouched():
    ids, mask, dec = _batch(120, padded=True)
    model, stock = tiny_t5(), tiny_t5(attn="sdpa")
    enable_efficient_t5(model, mode="always")
    enc_attn = model.encoder.block[0].layer[0].SelfAttention
    dec_attn = model.decoder.block[0].layer[0].SelfAttention
    assert "compute_bias" in enc_attn.__dict__ and "compute_bias" not in dec_attn.__dict__
    assert isinstance(enc_attn.compute_bias(50, 50), RelativeBiasTable)
    assert isinstance(dec_attn.compute_bias(6, 6), torch.Tensor)
    with torch.no_grad():
        enc = stock.encoder(input_ids=ids, attention_mask=mask)
        out = model(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=dec).logits
        ref = stock(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=dec).logits
    assert torch.equal(out, ref)  # decoder attention is stock SDPA, bit for bit


def test_auto_mode_threshold_and_disable():
    model = tiny_t5(attn="sdpa")
    enable_efficient_t5(model, mode="auto", min_length=64)
    assert model.config._attn_implementation == "lengthx"
    attn = model.encoder.block[0].layer[0].SelfAttention
    assert isinstance(attn.compute_bias(64, 64), torch.Tensor)  # short: stock
    assert isinstance(attn.compute_bias(65, 65), RelativeBiasTable)  # long: the offset table
    assert efficient_t5_settings(model).min_length == 64
    ids, mask, dec = _batch(50, padded=True)
    assert torch.equal(_logits(model, ids, mask, dec), _logits(tiny_t5(attn="sdpa"), ids, mask, dec))
    disable_efficient_t5(model)
    assert "compute_bias" not in attn.__dict__ and not hasattr(attn, SETTINGS_ATTR)
    assert isinstance(attn.compute_bias(65, 65), torch.Tensor)
    enable_efficient_t5(model, mode="always")
    enable_efficient_t5(model, mode="never")
    assert efficient_t5_settings(model) is None
    with pytest.raises(ValueError, match="valid modes"):
        enable_efficient_t5(model, mode="sometimes")


def test_gradients_match_stock():
    """The efficient paths are differentiable (the table is an ordinary autograd view of the embedding)."""
    ids, mask, dec = _batch(90, padded=True)
    grads = {}
    for name in ("stock", "sdpa", "explicit"):
        model = tiny_t5(attn="sdpa") if name == "stock" else tiny_t5()
        if name != "stock":
            enable_efficient_t5(model, mode="always", backend=name)
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, labels=dec).loss.backward()
        enc = model.encoder.block
        grads[name] = torch.cat([enc[0].layer[0].SelfAttention.relative_attention_bias.weight.grad.flatten(),
                                 enc[1].layer[0].SelfAttention.q.weight.grad.flatten()])
    for name in ("sdpa", "explicit"):
        assert torch.allclose(grads[name], grads["stock"], atol=1e-5), name


@pytest.mark.parametrize("backend,padded,stats", [("sdpa", False, False), ("sdpa", True, False),
                                                   ("explicit", True, True)])
def test_memory_bounded_no_full_bias(backend, padded, stats):
    """No allocation of the efficient forward exceeds one query block of scores, far below the (H, L, L) bias
    stock T5 builds (at this size stock's largest single allocation is exactly that bias)."""
    length = 2048
    model = tiny_t5()
    enable_efficient_t5(model, mode="always", backend=backend)
    ids, mask, _ = _batch(length, padded)
    modules = get_family("t5").temperature_modules(model, "encoder")
    full_bias = model.config.num_heads * length * length * 4
    with torch.no_grad(), torch.profiler.profile(profile_memory=True) as prof:
        if stats:
            with AttentionStats(modules, logit_vector=True):
                model.encoder(input_ids=ids[:2], attention_mask=mask[:2])
        else:
            model.encoder(input_ids=ids[:2], attention_mask=mask[:2] if padded else None)
    biggest = max(evt.cpu_memory_usage for evt in prof.events())
    assert biggest <= BLOCK_ELEMENTS * 4 < full_bias / 4, (biggest, full_bias)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention path runs on CUDA only")
def test_flex_matches_stock_on_cuda():  # pragma: no cover - needs a GPU
    ids, mask, dec = _batch(700, padded=True)
    stock = tiny_t5(attn="sdpa", d_kv=16).cuda()  # FlexAttention's kernel needs head dimensions of 16 or more
    model = tiny_t5(d_kv=16).cuda()
    enable_efficient_t5(model, mode="always", backend="flex")
    ref = _logits(stock, ids.cuda(), mask.cuda(), dec.cuda())
    assert (_logits(model, ids.cuda(), mask.cuda(), dec.cuda()) - ref).abs().max().item() <= 1e-3


def test_auto_backend_is_sdpa_everywhere_and_flex_refuses_small_heads():
    """``auto`` never picks FlexAttention (slower than SDPA over the view on an H200, results/bench/gpu-stats.md);
    statistics force the explicit path; flex below head dimension 16 is refused before any kernel compiles,
    naming the key and the fix (on a GPU the compiled kernel failed deep inside inductor)."""
    assert resolve_backend("auto", 8, with_stats=False) == "sdpa"
    assert resolve_backend("auto", 64, with_stats=False) == "sdpa"
    assert resolve_backend("flex", 64, with_stats=False) == "flex"
    assert resolve_backend("flex", 8, with_stats=True) == "explicit"
    model = tiny_t5()  # d_kv 8
    enable_efficient_t5(model, mode="always", backend="flex")
    ids, mask, dec = _batch(40, padded=False)
    with pytest.raises(ValueError, match=r"backend=flex needs a head dimension of at least 16.*backend=sdpa"):
        _logits(model, ids, None, dec)


def test_flex_gets_the_modules_own_scale_at_every_tau(monkeypatch):
    """FlexAttention compiles per distinct ``scale``: τ is applied in ``score_mod``, so the scale passed is the
    module's own (T5: 1.0) exactly, never (1/τ)·τ (0.9999999999999999 at τ = 0.95, a recompile per τ)."""
    import lengthx.attention.t5_bias as t5_bias

    seen = []

    def spy(query, key, value, table, q_len, keep, scaling, tau):
        seen.append((scaling, tau))
        return torch.zeros_like(query)

    monkeypatch.setattr(t5_bias, "flex_attend", spy)
    model = tiny_t5(d_kv=16)
    enable_efficient_t5(model, mode="always", backend="flex")
    ids, mask, dec = _batch(40, padded=False)
    for tau in (1.0, 0.95, 0.7):
        set_temperature(get_family("t5").temperature_modules(model, "encoder"), tau)
        _logits(model, ids, None, dec)
    assert {s for s, _ in seen} == {1.0} and {t for _, t in seen} == {1.0, 0.95, 0.7}


def test_the_device_blocks_give_the_tiles_outputs_and_statistics(monkeypatch):
    """On an accelerator the explicit path runs over blocks of query rows of all heads (few large kernels);
    run here on the CPU, it gives the per-head tiles' encoder output, P_max, entropy and layer-0 logit vector."""
    import lengthx.attention.tiled_softmax as tiled
    from lengthx.attention import fused

    monkeypatch.setenv(fused.ENV_SWITCH, "0")  # the tiles and blocks themselves, not the fused kernel
    ids, mask, _ = _batch(500, padded=True)
    model = tiny_t5()
    enable_efficient_t5(model, mode="always", backend="explicit")
    modules = get_family("t5").temperature_modules(model, "encoder")
    set_temperature(modules, 0.7)

    def encode():
        with torch.no_grad(), AttentionStats(modules, logit_vector=True) as stats:
            out = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return out, stats.pmax(), stats.entropy(), stats.logit_vector(0.7)

    tiles = encode()
    monkeypatch.setattr(tiled, "TILED_DEVICES", ())
    monkeypatch.setattr(tiled, "DEVICE_BLOCK_ELEMENTS", 3 * 4 * 500 * 40)  # several blocks of 40 rows
    seen = []
    real = tiled._explicit_blocks
    monkeypatch.setattr(tiled, "_explicit_blocks", lambda call, n: seen.append(n) or real(call, n))
    blocks = encode()
    assert seen and set(seen) == {tiled.DEVICE_BLOCK_ELEMENTS}
    for a, b in zip(tiles, blocks, strict=True):
        assert torch.allclose(a.float(), b.float(), atol=1e-5, rtol=1e-5), (a - b).abs().max()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the device block layout is exercised on CUDA")
def test_statistics_on_cuda_match_the_cpu_tiles():  # pragma: no cover - needs a GPU
    """On CUDA the explicit path takes blocks of all heads; its output and statistics equal the CPU tiles'."""
    ids, mask, _ = _batch(600, padded=True)
    results = []
    for device in ("cpu", "cuda"):
        model = tiny_t5().to(device)
        enable_efficient_t5(model, mode="always", backend="explicit")
        modules = get_family("t5").temperature_modules(model, "encoder")
        set_temperature(modules, 0.7)
        with torch.no_grad(), AttentionStats(modules, logit_vector=True) as stats:
            out = model.encoder(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        results.append((out.cpu(), stats.pmax(), stats.entropy(), stats.logit_vector(0.7)))
    for a, b in zip(*results, strict=True):
        assert torch.allclose(a.float(), b.float().cpu(), atol=1e-4, rtol=1e-4), (a - b.cpu()).abs().max()


def test_device_blocks_score_bf16_inputs_in_fp32(monkeypatch):
    """Statistics over the device blocks with bf16 q, k, v and table at τ = 0.7: q·k, T/τ and their sum are not
    rounded to bf16 before the softmax, so each head's mean P_max and entropy match the fp64 softmax of the same
    (bf16-valued) numbers to 1e-5; bf16 scores (the blocks before) miss the entropy by about 1e-3."""
    import lengthx.attention.tiled_softmax as tiled
    from lengthx.attention.t5_bias import RelativeBiasTable
    from lengthx.attention.temperature import AttentionCall

    monkeypatch.setattr(tiled, "TILED_DEVICES", ())  # the layout a GPU takes, here on the CPU
    g = torch.Generator().manual_seed(0)
    b, h, n, d, tau = 2, 4, 300, 16, 0.7
    q, k, v = (torch.randn(b, h, n, d, generator=g).to(torch.bfloat16) for _ in range(3))
    table = (2.0 * torch.randn(h, 2 * n - 1, generator=g)).to(torch.bfloat16)
    module = get_family("t5").temperature_modules(tiny_t5(num_heads=h), "encoder")[0]
    with torch.no_grad(), AttentionStats([module]) as stats:
        RelativeBiasTable(table, n, n).attend(AttentionCall(module, q, k, v, None, scaling=1.0, tau=tau, stats=stats))
    idx = torch.arange(n)
    scores = (q.double() @ k.double().transpose(-1, -2) + table.double()[:, idx[None, :] - idx[:, None] + n - 1]) / tau
    probs = torch.softmax(scores, -1)
    pmax = probs.amax(-1).mean((0, 2))
    entropy = -(probs * probs.log()).sum(-1).mean((0, 2))
    assert (stats.pmax()[0].double() - pmax).abs().max() <= 1e-5
    assert (stats.entropy()[0].double() - entropy).abs().max() <= 1e-5, (stats.entropy()[0].double() - entropy)
