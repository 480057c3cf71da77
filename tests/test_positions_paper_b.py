"""Paper B positions: APE interpolation (§3.2), explicit-position ALiBi (BLOOM), GPT-2/NeoX position ids."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_bloom, tiny_gpt2, tiny_neox
from transformers import BloomForCausalLM, GPT2LMHeadModel

from lengthx.segmented.models import (
    enable_explicit_alibi,
    extend_ape,
    extend_rope,
    prepare_for_length,
    segmented_forward,
)
from lengthx.segmented.positions import alibi_bias, alibi_key_bias, alibi_slopes, interpolate_ape
from lengthx.segmented.sampling import chunk_sample, prefix_sample

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- interpolate_ape ----------------------------------------------------------------------------------
def test_interpolate_ape_beta_2_hand_computed():
    e = torch.tensor([[1.0, 0.0], [3.0, 2.0], [-1.0, 4.0]])  # L_t = 3
    expected = torch.tensor(
        [
            [1.0, 0.0],  # e'_0 = e_0
            [2.0, 1.0],  # e'_1 = ½e_0 + ½e_1
            [3.0, 2.0],  # e'_2 = e_1
            [1.0, 3.0],  # e'_3 = ½e_1 + ½e_2
            [-1.0, 4.0],  # e'_4 = e_2
            [-1.0, 4.0],  # e'_5 = ½e_2 + ½e_3, e_3 := e_2
        ]
    )
    assert torch.equal(interpolate_ape(e, 6), expected)


def test_interpolate_ape_beta_4_hand_computed():
    e = torch.tensor([[0.0, 4.0], [8.0, 0.0]])  # L_t = 2
    expected = torch.tensor(
        [
            [0.0, 4.0],  # e_0
            [2.0, 3.0],  # ¾e_0 + ¼e_1
            [4.0, 2.0],  # ½e_0 + ½e_1
            [6.0, 1.0],  # ¼e_0 + ¾e_1
            [8.0, 0.0],  # e_1
            [8.0, 0.0],
            [8.0, 0.0],
            [8.0, 0.0],  # between e_1 and e_2 := e_1
        ]
    )
    assert torch.equal(interpolate_ape(e, 8), expected)


@pytest.mark.parametrize("beta", [2, 3, 4, 5])
def test_interpolate_ape_matches_the_formula_and_keeps_old_rows(beta):
    torch.manual_seed(beta)
    w = torch.randn(16, 8)
    new = interpolate_ape(w, 16 * beta)
    assert new.shape == (16 * beta, 8) and new.dtype == w.dtype
    ext = torch.cat([w, w[-1:]]).double()  # e_{L_t} = e_{L_t − 1}
    for i in range(16 * beta):
        ref = (beta - i % beta) / beta * ext[i // beta] + (i % beta) / beta * ext[i // beta + 1]
        assert torch.allclose(new[i].double(), ref, atol=1e-6)
    assert torch.equal(new[::beta], w), "e'_{βi} = e_i"


def test_interpolate_ape_edge_cases():
    w = torch.randn(4, 3, dtype=torch.float16)
    before = w.clone()
    assert torch.equal(interpolate_ape(w, 4), w)
    out = interpolate_ape(w, 10)  # non-integral β = 2.5: same rule at i·L_t/L_e
    assert out.dtype == torch.float16 and torch.equal(w, before)
    assert torch.allclose(out[5].float(), w[2].float()) and torch.allclose(
        out[1].float(), (0.6 * w[0] + 0.4 * w[1]).float(), atol=1e-3
    )
    with pytest.raises(ValueError, match="grows"):
        interpolate_ape(w, 3)


# ---- ALiBi helpers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("heads", [1, 2, 4, 6, 8, 12, 16])
def test_alibi_slopes(heads):
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    s = alibi_slopes(heads)
    assert torch.equal(s, _get_alibi_slopes(heads, torch.device("cpu")))
    if heads & (heads - 1) == 0:
        assert torch.allclose(s, torch.tensor([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)]))


def test_key_bias_and_full_bias_give_the_same_attention():
    pos = torch.tensor([[0, 1, 5, 6, 9, 10]])
    slopes = alibi_slopes(4)
    scores = torch.randn(1, 4, 6, 6)
    causal = torch.full((6, 6), float("-inf")).triu(1)
    a = torch.softmax(scores + alibi_key_bias(slopes, pos) + causal, -1)
    b = torch.softmax(scores + alibi_bias(slopes, pos) + causal, -1)
    assert torch.allclose(a, b, atol=1e-6)
    assert alibi_bias(slopes, pos)[0, 1, 3, 2] == -slopes[1] * 1  # p_3 − p_2 = 1
    assert alibi_bias(slopes, pos)[0, 0, 2, 1] == -slopes[0] * 4  # a gap of 4 positions


# ---- BLOOM with explicit positions ------------------------------------------------------------------------
def test_bloom_explicit_contiguous_positions_equal_stock():
    stock = tiny_bloom()
    ids = torch.randint(3, 64, (2, 20), generator=torch.Generator().manual_seed(0))
    ref = stock(ids).logits
    ref_masked = stock(ids, attention_mask=torch.ones_like(ids)).logits
    explicit = enable_explicit_alibi(tiny_bloom())
    pos = torch.arange(20).expand(2, -1)
    assert torch.allclose(explicit(ids, position_ids=pos).logits, ref, atol=1e-6)
    assert torch.allclose(
        explicit(ids, position_ids=pos, attention_mask=torch.ones_like(ids)).logits, ref_masked, atol=1e-6
    )
    assert torch.allclose(explicit(ids).logits, ref, atol=1e-6), "without position_ids it is stock BLOOM"
    assert enable_explicit_alibi(explicit) is explicit  # idempotent: hooks are not stacked
    assert torch.allclose(explicit(ids, position_ids=pos).logits, ref, atol=1e-6)


def _layer0_reference_attention(
    model: BloomForCausalLM, ids: torch.Tensor, positions: list[int]
) -> torch.Tensor:
    """Layer-0 attention probabilities computed by hand, with ALiBi −slope_h·(p_i − p_j) written out."""
    block = model.transformer.h[0]
    heads, length = model.config.n_head, ids.shape[1]
    head_dim = model.config.hidden_size // heads
    with torch.no_grad():
        h0 = model.transformer.word_embeddings_layernorm(model.transformer.word_embeddings(ids))
        qkv = block.self_attention.query_key_value(block.input_layernorm(h0))
        qkv = qkv.view(1, length, heads, 3, head_dim)
        q, k = qkv[..., 0, :].transpose(1, 2), qkv[..., 1, :].transpose(1, 2)
        slopes = [2.0 ** (-8 * (h + 1) / heads) for h in range(heads)]  # 4 heads: 1/4, 1/16, 1/64, 1/256
        bias = torch.zeros(1, heads, length, length)
        for h in range(heads):
            for i in range(length):
                for j in range(length):
                    bias[0, h, i, j] = -slopes[h] * (positions[i] - positions[j]) if j <= i else -math.inf
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim) + bias
    return torch.softmax(scores, dim=-1)


def test_bloom_explicit_positions_match_hand_built_alibi_and_differ_from_stock():
    model = enable_explicit_alibi(tiny_bloom(layers=1))
    ids = torch.randint(3, 64, (1, 12), generator=torch.Generator().manual_seed(1))
    positions = chunk_sample(48, 12, 0.25, torch.Generator().manual_seed(2)).tolist()
    assert positions != list(range(12)) and positions[-1] > 20  # gaps, far positions
    out = model(ids, position_ids=torch.tensor([positions]), output_attentions=True)
    ref = _layer0_reference_attention(model, ids, positions)
    assert torch.allclose(out.attentions[0], ref, atol=1e-5), "ALiBi follows the explicit positions"
    stock = model(ids, output_attentions=True)  # stock BLOOM: contiguous positions 0..11
    assert torch.allclose(
        stock.attentions[0], _layer0_reference_attention(model, ids, list(range(12))), atol=1e-5
    )
    assert not torch.allclose(stock.attentions[0], out.attentions[0], atol=1e-3)
    assert not torch.allclose(stock.logits, out.logits, atol=1e-4)


def test_bloom_body_takes_position_ids_and_trains():
    model = enable_explicit_alibi(tiny_bloom())
    ids = torch.randint(3, 64, (2, 16), generator=torch.Generator().manual_seed(3))
    pos, _ = prefix_sample(64, 16, 0.5, torch.Generator().manual_seed(4))
    via_head = model(ids, position_ids=pos[None]).logits
    hidden = model.transformer(ids, position_ids=pos[None]).last_hidden_state
    assert torch.allclose(model.lm_head(hidden), via_head, atol=1e-6)
    model.train()
    loss = model(ids, position_ids=pos[None], labels=ids).loss
    loss.backward()
    assert model.transformer.h[0].self_attention.query_key_value.weight.grad is not None


# ---- GPT-2 / GPT-NeoX with position ids -------------------------------------------------------------------
@pytest.mark.parametrize("make", [tiny_gpt2, tiny_neox], ids=["gpt2", "neox"])
def test_segmented_forward_equals_full_forward_restricted_to_the_kept_tokens(make):
    """A segmented sequence at original positions = the long sequence with every other token masked out."""
    model = make()
    full = torch.randint(3, 64, (1, 48), generator=torch.Generator().manual_seed(5))
    pos = chunk_sample(48, 16, 0.25, torch.Generator().manual_seed(6))
    seg = segmented_forward(model, full[:, pos], pos[None]).logits
    kept = torch.zeros(48, dtype=torch.bool)
    kept[pos] = True
    allowed = torch.tril(torch.ones(48, 48, dtype=torch.bool)) & kept[None, :]
    allowed |= torch.eye(48, dtype=torch.bool)  # dropped queries see themselves (no empty rows)
    mask = torch.zeros(1, 1, 48, 48).masked_fill(~allowed, torch.finfo(torch.float32).min)
    ref = model(full, attention_mask=mask, use_cache=False).logits[:, pos]
    assert torch.allclose(seg, ref, atol=1e-5)
    # a chunk of one full segment (L_e = L_t) is the plain forward
    whole = chunk_sample(16, 16, 0.25, torch.Generator().manual_seed(0))
    assert torch.equal(whole, torch.arange(16))
    assert torch.allclose(
        segmented_forward(model, full[:, :16], whole[None]).logits, model(full[:, :16]).logits, atol=1e-6
    )


@pytest.mark.parametrize("make", [tiny_gpt2, tiny_neox], ids=["gpt2", "neox"])
def test_segments_attend_to_each_other(make):
    """Without the explicit mask transformers 5 would read the gaps as packed sequences and isolate them."""
    model = make()
    pos = torch.tensor([[0, 1, 2, 3, 20, 21, 22, 23]])
    ids = torch.randint(3, 64, (1, 8), generator=torch.Generator().manual_seed(7))
    changed = ids.clone()
    changed[0, 1] = (ids[0, 1] + 1) % 64
    a = segmented_forward(model, ids, pos).logits
    b = segmented_forward(model, changed, pos).logits
    assert not torch.allclose(a[0, 4:], b[0, 4:]), "segment 2 sees segment 1"
    packed = model(ids, position_ids=pos, use_cache=False).logits  # what the missing mask would do
    assert not torch.allclose(packed[0, 4:], a[0, 4:], atol=1e-4)


def test_extend_ape_grows_wpe_by_interpolation(tmp_path):
    model = tiny_gpt2(n_positions=16)
    old = model.transformer.wpe.weight.detach().clone()
    assert extend_ape(model, 64) and not extend_ape(model, 32)
    assert model.config.n_positions == 64 and model.transformer.wpe.num_embeddings == 64
    assert torch.equal(model.transformer.wpe.weight.detach(), interpolate_ape(old, 64))
    assert model.transformer.wpe.weight.requires_grad
    pos = chunk_sample(64, 16, 0.25, torch.Generator().manual_seed(0))
    ids = torch.randint(3, 64, (1, 16))
    out = segmented_forward(model, ids, pos[None]).logits
    model.save_pretrained(tmp_path)
    again = GPT2LMHeadModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert again.config.n_positions == 64
    assert torch.allclose(segmented_forward(again, ids, pos[None]).logits, out, atol=1e-6)


def test_extend_rope_and_prepare_for_length():
    neox = tiny_neox(max_position_embeddings=16)
    assert extend_rope(neox, 64) and neox.config.max_position_embeddings == 64
    info = prepare_for_length(tiny_gpt2(n_positions=16), "gpt2", 48)
    assert info["ape_interpolated"] and (info["positions_before"], info["positions_after"]) == (16, 48)
    assert prepare_for_length(tiny_bloom(), "bloom", 4096)["explicit_alibi"]
    with pytest.raises(ValueError, match="encoder-decoder"):
        prepare_for_length(tiny_gpt2(), "t5", 64)
