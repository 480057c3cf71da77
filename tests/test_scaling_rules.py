"""Attention-scaling rules from the field as τ (lengthx.attention.scaling): each formula against its published
form or transformers' own implementation, and the per-row τ of the attention hook against softmax written by
hand on tiny GPT-2, GPT-NeoX and BLOOM models built from configs."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import tiny_bloom, tiny_gpt2, tiny_neox
from omegaconf import OmegaConf
from test_bloom_temperature import left_padded_batch, logits_of, reference_logits
from transformers import AttentionInterface, LlamaConfig
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from lengthx.alignment.propositions import RULE_METHODS, log_temperature, rule_temperature
from lengthx.attention.scaling import (
    RowScale,
    longrope_factor,
    longrope_temperature,
    yarn_mscale,
    yarn_temperature,
)
from lengthx.attention.temperature import ATTN_NAME, register, set_temperature
from lengthx.models.families import get_family

pytestmark = pytest.mark.usefixtures("one_thread")

LENGTHS = [(128, 128), (128, 256), (128, 384), (128, 640), (2048, 4096), (2048, 10240), (512, 15000)]


def _rope_attention_factor(rope_type: str, l_tr: int, l_ex: int, **extra) -> float:
    """The factor transformers' own RoPE initialisation puts on cos and sin for this extension."""
    params = {"rope_type": rope_type, "factor": l_ex / l_tr, "original_max_position_embeddings": l_tr,
              "rope_theta": 10000.0, **extra}
    config = LlamaConfig(hidden_size=32, num_attention_heads=4, max_position_embeddings=l_ex, rope_parameters=params)
    return ROPE_INIT_FUNCTIONS[rope_type](config)[1]


@pytest.mark.parametrize(("l_tr", "l_ex"), [x for x in LENGTHS if x[1] > x[0]])
def test_yarn_is_the_mscale_transformers_puts_on_cos_and_sin(l_tr, l_ex):
    assert yarn_mscale(l_ex, l_tr) == pytest.approx(_rope_attention_factor("yarn", l_tr, l_ex), abs=1e-12)
    s = l_ex / l_tr  # the paper's sqrt(1/t) = 0.1 ln s + 1, and τ = t
    assert yarn_temperature(l_ex, l_tr) == pytest.approx((0.1 * math.log(s) + 1) ** -2, abs=1e-12)


@pytest.mark.parametrize(("l_tr", "l_ex"), [x for x in LENGTHS if x[1] > x[0]])
def test_longrope_is_the_attention_factor_of_transformers(l_tr, l_ex):
    half = [1.0] * 4  # head_dim 8: one extension factor per rotary pair
    got = _rope_attention_factor("longrope", l_tr, l_ex, long_factor=half, short_factor=half)
    assert longrope_factor(l_ex, l_tr) == pytest.approx(got, abs=1e-12)


@pytest.mark.parametrize(("l_tr", "l_ex"), LENGTHS + [(128, 64), (2048, 100)])
def test_longrope_gives_the_log_rule(l_tr, l_ex):
    """1/factor² = 1/(1 + ln s/ln L_tr) = ln L_tr / ln L_ex: LongRoPE's factor squared is paper A's log rule."""
    assert abs(longrope_temperature(l_ex, l_tr) - log_temperature(l_ex, l_tr)) < 1e-12
    log = rule_temperature(OmegaConf.create({"name": "log"}), l_ex, l_tr)
    assert abs(rule_temperature(OmegaConf.create({"name": "longrope"}), l_ex, l_tr) - log) < 1e-12


@pytest.mark.parametrize("l_ex", [64, 128])
def test_static_rules_leave_lengths_up_to_l_tr_alone(l_ex):
    for name in ("log", "yarn", "longrope"):
        assert rule_temperature(OmegaConf.create({"name": name}), l_ex, 128) == 1.0
    assert rule_temperature(OmegaConf.create({"name": "fixed", "tau": 0.7}), l_ex, 128) == 0.7
    assert set(RULE_METHODS) == {"none", "fixed", "log", "yarn", "longrope", "logn", "ssmax"}


def test_logn_is_qwens_list():
    """Qwen's ``logn_list``: log(i, L_tr) for i > L_tr else 1, i = 1, 2, … (1-based: a query at 0-based p is i = p + 1)."""
    l_tr = 16
    qwen = [math.log(i, l_tr) if i > l_tr else 1 for i in range(1, 200)]
    got = RowScale("logn", l_tr).scale(torch.arange(1, 200))
    assert torch.allclose(got.double(), torch.tensor(qwen, dtype=torch.float64), atol=1e-6, rtol=0)
    assert RowScale("logn", l_tr).tau(l_tr) == 1.0 and RowScale("logn", l_tr).tau(l_tr**2) == pytest.approx(0.5)


def test_ssmax_scale_is_s_log_n_fitted_at_l_tr():
    """SSMax multiplies the scores by s·ln n (n keys); s = 1/ln L_tr makes the scale 1 at n = L_tr."""
    l_tr = 16
    n = torch.arange(1, 200)
    s = 1 / math.log(l_tr)
    want = torch.tensor([s * math.log(k) for k in range(1, 200)], dtype=torch.float64)
    got = RowScale("ssmax", l_tr).scale(n).double()
    assert torch.allclose(got, want, atol=1e-6, rtol=0)
    assert got[l_tr - 1] == pytest.approx(1.0, abs=1e-6) and got[0] == 0.0
    assert RowScale("ssmax", l_tr).tau(1) == math.inf
    logn = RowScale("logn", l_tr).scale(n).double()  # above L_tr both are log_{L_tr} n
    assert torch.allclose(got[l_tr:], logn[l_tr:], atol=1e-6) and (got[: l_tr - 1] < 1).all()


def test_unknown_rules_fail():
    with pytest.raises(ValueError, match="valid: logn, ssmax"):
        RowScale("yarn", 16)
    with pytest.raises(ValueError, match="no closed-form"):
        rule_temperature(OmegaConf.create({"name": "pmax"}), 256, 128)


# ---- the hook: per-row τ against a softmax written by hand -------------------------------------------------
L_TR = 5  # short, so that most rows of a 16-token sequence are past it
REF_NAME = "lengthx-test-rows"


def _lam(rule: str, n: int, l_tr: int = L_TR) -> float:
    """λ_n = 1/τ_n by the formulas as published (n = the row's 1-based position = keys it sees, causal)."""
    if rule == "logn":
        return math.log(n, l_tr) if n > l_tr else 1.0
    return math.log(n) / math.log(l_tr)


def _hand_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, rule="logn", l_tr=L_TR,
                    **kwargs):
    """softmax(λ_i·QKᵀ·scaling + causal mask) V with λ from :func:`_lam`, rows at 0-based positions K−Q…K−1."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    if key.shape[1] != query.shape[1]:
        key = key.repeat_interleave(query.shape[1] // key.shape[1], 1)
        value = value.repeat_interleave(query.shape[1] // value.shape[1], 1)
    logits = query @ key.transpose(-1, -2) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    lam = torch.tensor([_lam(rule, p + 1, l_tr) for p in range(k_len - q_len, k_len)], dtype=logits.dtype)
    allowed = torch.ones(q_len, k_len).tril(k_len - q_len).bool()
    scores = (logits * lam[:, None]).masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ value).transpose(1, 2).contiguous(), None


def hand_reference(model, rule, l_tr=L_TR):
    """A copy of ``model`` whose every attention is :func:`_hand_attention` (no padding)."""
    AttentionInterface.register(REF_NAME, lambda *a, **k: _hand_attention(*a, rule=rule, l_tr=l_tr, **k))
    AttentionMaskInterface.register(REF_NAME, sdpa_mask)
    ref = copy.deepcopy(model)
    ref.set_attn_implementation(REF_NAME)
    return ref


BUILDERS = {"gpt2": tiny_gpt2, "gpt_neox": tiny_neox}


@pytest.mark.parametrize("family", list(BUILDERS))
@pytest.mark.parametrize("rule", ["logn", "ssmax"])
def test_per_row_tau_equals_a_hand_written_softmax(family, rule):
    register()
    model = BUILDERS[family](attn=ATTN_NAME, seed=1, initializer_range=0.1)  # peaked enough for τ to show
    ids = torch.randint(3, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    stock = logits_of(model, ids, None)
    set_temperature(get_family(family).temperature_modules(model, "all"), RowScale(rule, L_TR))
    ours = logits_of(model, ids, None)
    ref = logits_of(hand_reference(model, rule), ids, None)
    torch.testing.assert_close(ours, ref, atol=2e-5, rtol=1e-5)
    changed = (ours - stock).abs().amax(-1)[0]  # rows up to L_tr are stock under logn; all but row 0 move under ssmax
    assert changed[L_TR:].min() > 1e-4
    assert (changed[:L_TR].max() < 1e-5) if rule == "logn" else (changed[1:L_TR].min() > 1e-4)


@pytest.mark.parametrize("rule", ["logn", "ssmax"])
def test_per_row_tau_with_a_kv_cache_matches_the_full_pass(rule):
    """Decoding with a cache: a single query row at 0-based position K−1 sees K keys, as in the full pass."""
    register()
    model = tiny_neox(attn=ATTN_NAME, seed=2)
    set_temperature(get_family("gpt_neox").temperature_modules(model, "all"), RowScale(rule, L_TR))
    ids = torch.randint(3, 64, (1, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = model(input_ids=ids).logits
        past = model(input_ids=ids[:, :-2], use_cache=True).past_key_values
        step1 = model(input_ids=ids[:, -2:-1], past_key_values=past, use_cache=True)
        step2 = model(input_ids=ids[:, -1:], past_key_values=step1.past_key_values).logits
    torch.testing.assert_close(step1.logits[:, 0], full[:, -2], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(step2[:, 0], full[:, -1], atol=2e-5, rtol=1e-5)


def test_yarn_tau_equals_mscale_on_cos_and_sin():
    """YaRN multiplies RoPE's cos and sin by mscale; with every dimension rotated that is τ = 1/mscale²."""
    register()
    full_rotary = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
                   "initializer_range": 0.1}
    ours = tiny_neox(attn=ATTN_NAME, seed=3, **full_rotary)
    scaled = tiny_neox(attn="eager", seed=3, **full_rotary)
    assert scaled.gpt_neox.layers[0].attention.rotary_ndims == scaled.gpt_neox.layers[0].attention.head_size
    mscale = yarn_mscale(64, 16)
    scaled.gpt_neox.rotary_emb.attention_scaling = mscale
    set_temperature(get_family("gpt_neox").temperature_modules(ours, "all"), yarn_temperature(64, 16))
    ids = torch.randint(3, 64, (2, 20), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(logits_of(ours, ids, None), logits_of(scaled, ids, None), atol=2e-5, rtol=1e-5)
    stock = tiny_neox(attn="eager", seed=3, **full_rotary)
    assert (logits_of(ours, ids, None) - logits_of(stock, ids, None)).abs().max() > 1e-3


@pytest.mark.parametrize("rule", ["logn", "ssmax"])
def test_per_row_tau_on_bloom_with_left_padding(rule):
    """BLOOM (inline ALiBi): each valid row's logits, ALiBi included, times λ_n, n = its real keys."""
    ids, mask = left_padded_batch()
    model = tiny_bloom(sharpen=True)
    set_temperature(get_family("bloom").temperature_modules(model, "all"), RowScale(rule, L_TR))
    ours = logits_of(model, ids, mask)
    keys = mask.cumsum(-1).clamp(min=1)  # real keys up to and including each position
    lam = torch.tensor([[_lam(rule, int(n)) for n in row] for row in keys])
    tau = (1.0 / lam)[:, None, :, None]  # (B, 1, rows, 1); inf where λ = 0 (one key: probability 1 anyway)
    ref = reference_logits(model, ids, mask, tau)
    valid = mask.bool()
    torch.testing.assert_close(ours[valid], ref[valid], atol=2e-5, rtol=1e-5)
    assert (ours[valid] - logits_of(tiny_bloom(sharpen=True), ids, mask)[valid]).abs().max() > 1e-3


# ---- paper A's runner: the static rules are τ methods of every task ---------------------------------------------
def test_runner_applies_yarn_and_refuses_per_row_rules_on_t5(tiny_model_dir, tmp_path):
    from lengthx.core.runner import Runner
    from lengthx.core.store import ResultsStore
    from lengthx.models.minis import compose_run

    common = ["task=passkey", f"model.path={tiny_model_dir}", "model.l_tr=300", "task.num_examples=1",
              "task.settings=[320]", f"results_dir={tmp_path}", "device=cpu"]
    summary = Runner(compose_run([*common, "method=yarn"])).run()
    assert [s["status"] for s in summary] == ["ok"]
    row = ResultsStore(tmp_path).read().query("metric == 'tau'").iloc[0]
    assert row["method"] == "yarn" and row["value"] == pytest.approx(yarn_temperature(row["L_ex"], 300), abs=1e-4)
    with pytest.raises(ValueError, match="use method=log"):
        Runner(compose_run([*common, "method=logn"]))
