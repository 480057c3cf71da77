"""τ in T5 encoder self-attention (paper A §4, docs/design.md §5) against stock transformers and an explicit reference."""

from __future__ import annotations

import torch
from conftest import tiny_t5

from lengthx.attention.temperature import TAU_ATTR, set_temperature
from lengthx.models.families import get_family


def _logits(model, ids, mask, dec):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits


def test_tau_one_is_identical_to_stock(padded_batch):
    ids, mask, dec = padded_batch
    ours = tiny_t5()
    set_temperature(get_family("t5").temperature_modules(ours, "encoder"), 1.0)
    stock = tiny_t5(attn="sdpa")
    assert torch.equal(_logits(ours, ids, mask, dec), _logits(stock, ids, mask, dec))


def _reference_encoder(model, ids, mask, tau):
    """Hand-written T5 encoder: softmax((QKᵀ + bias)/τ + mask) in every self-attention layer."""
    enc = model.encoder
    h = enc.embed_tokens(ids)
    attn0 = enc.block[0].layer[0].SelfAttention
    L = ids.shape[1]
    bias = attn0.compute_bias(L, L)  # stock bucket + embedding lookup, (1, H, L, L)
    add_mask = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    for block in enc.block:
        sa = block.layer[0].SelfAttention
        x = block.layer[0].layer_norm(h)
        B, _, _ = x.shape
        q = sa.q(x).view(B, L, sa.n_heads, -1).transpose(1, 2)
        k = sa.k(x).view(B, L, sa.n_heads, -1).transpose(1, 2)
        v = sa.v(x).view(B, L, sa.n_heads, -1).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2) + bias) / tau + add_mask
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, -1)
        h = h + sa.o(out)
        h = block.layer[-1](h)
    return enc.final_layer_norm(h)


def test_tau_matches_explicit_reference_with_padding(padded_batch):
    ids, mask, _ = padded_batch
    model = tiny_t5()
    tau = 0.6
    set_temperature(get_family("t5").temperature_modules(model, "encoder"), tau)
    with torch.no_grad():
        ours = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        ref = _reference_encoder(model, ids, mask, tau)
        ref_tau1 = _reference_encoder(model, ids, mask, 1.0)
    valid = mask.bool()
    assert torch.allclose(ours[valid], ref[valid], atol=1e-5)
    # and τ really changed something
    assert (ours[valid] - ref_tau1[valid]).abs().max() > 1e-2


def test_tau_changes_only_encoder_self_attention(padded_batch):
    ids, mask, dec = padded_batch
    model = tiny_t5()
    stock = tiny_t5(attn="sdpa")
    set_temperature(get_family("t5").temperature_modules(model, "encoder"), 0.5)
    touched = {id(m) for m in get_family("t5").temperature_modules(model, "encoder")}
    for block in model.decoder.block:
        assert not hasattr(block.layer[0].SelfAttention, TAU_ATTR)
        assert not hasattr(block.layer[1].EncDecAttention, TAU_ATTR)
    assert len(touched) == len(model.encoder.block)
    with torch.no_grad():
        enc = model.encoder(input_ids=ids, attention_mask=mask)
        enc_stock = stock.encoder(input_ids=ids, attention_mask=mask)
        # the decoder, fed the *same* encoder states, is exactly stock: decoder attention is untouched
        out = model(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=dec).logits
        out_stock = stock(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=dec).logits
    assert torch.equal(out, out_stock)
    assert not torch.allclose(enc.last_hidden_state, enc_stock.last_hidden_state)


def test_scope_all_reaches_decoder(padded_batch):
    ids, mask, dec = padded_batch
    model, stock = tiny_t5(), tiny_t5(attn="sdpa")
    modules = get_family("t5").temperature_modules(model, "all")
    assert len(modules) == 3 * 2
    set_temperature(modules, 0.5)
    with torch.no_grad():
        enc = stock.encoder(input_ids=ids, attention_mask=mask)
        out = model(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=dec).logits
        out_stock = stock(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=dec).logits
    assert not torch.allclose(out, out_stock)
