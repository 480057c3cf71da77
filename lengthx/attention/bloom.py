"""Softmax temperature and attention statistics for BLOOM (paper A §4 extended to ALiBi; docs/design.md §5, §9).

BLOOM in transformers 5.x is eager-only and does not dispatch through ``AttentionInterface``: each
``BloomAttention`` computes its scores inline as ``alibi.baddbmm(Q, Kᵀ, beta=beta, alpha=inv_norm_factor)``,
i.e. l = beta·alibi + inv_norm_factor·QKᵀ (beta = 1, inv_norm_factor = 1/sqrt(d_head)), then adds the
additive causal/padding mask and takes the softmax. The temperature operation of docs/design.md §5 is

    softmax(l / τ + mask)  =  softmax(baddbmm(alibi, Q, Kᵀ, beta=beta/τ, alpha=inv_norm_factor/τ) + mask),

so the position bias (ALiBi) and the content logits are divided by τ and the mask is not. This module serves
that operation by swapping the class of every ``BloomAttention`` instance for
:class:`TemperatureBloomAttention` (:func:`enable_temperature`), a subclass whose ``forward`` reads τ from
``module.lengthx_tau`` and an optional :class:`~lengthx.attention.stats.AttentionStats` from
``module.lengthx_stats`` — the same attributes as the ``AttentionInterface`` path
(``lengthx.attention.temperature``), so ``set_temperature``, ``AttentionStats`` and Algorithm 1
(``lengthx.alignment``) work unchanged. Applying it to BLOOM's self-attention is an extension beyond paper A.

* With τ = 1 and no statistics the stock ``BloomAttention.forward`` runs, so logits are bit-identical.
* A per-row rule (logn, SSMax; :class:`lengthx.attention.scaling.RowScale`) multiplies each query row of the
  τ = 1 logits, ALiBi included, by its λ_n = 1/τ_n, n = the keys the row sees under BLOOM's causal mask.
* Otherwise the scores are built one query block at a time (at most ``QUERY_BLOCK`` rows of scores exist at
  once, docs/design.md §9), and P_max/entropy (and, when requested, the layer's raw logits for the average logit
  vector) are fed to the statistics object from the same block.
* The ALiBi tensor is consumed as the model built it, so :func:`lengthx.segmented.models.enable_explicit_alibi`
  (which only replaces how BLOOM builds ``alibi`` from explicit ``position_ids``, paper B §3.1) composes with
  this: temperature then scales the explicit-position ALiBi.

Weights, ``state_dict`` and ``save_pretrained`` are untouched; :func:`disable_temperature` restores the
stock class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.bloom.modeling_bloom import BloomAttention, dropout_add

from lengthx.attention.scaling import RowScale, temper
from lengthx.attention.stats import STATS_ATTR
from lengthx.attention.temperature import QUERY_BLOCK, module_tau

if TYPE_CHECKING:
    from transformers.cache_utils import Cache

    from lengthx.attention.stats import AttentionStats


def _body(model: nn.Module) -> nn.Module:
    """The ``BloomModel`` under a ``BloomForCausalLM`` (or the model itself)."""
    return getattr(model, "transformer", model)


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The self-attention module of every BLOOM block, in layer order."""
    body = _body(model)
    if not hasattr(body, "h"):
        raise TypeError(f"{type(model).__name__} is not a BLOOM model (no .h blocks)")
    return [block.self_attention for block in body.h]


class TemperatureBloomAttention(BloomAttention):
    """``BloomAttention`` with softmax((beta·alibi + inv_norm_factor·QKᵀ)/τ + mask) and statistics capture.

    τ is ``self.lengthx_tau`` (default 1); statistics go to ``self.lengthx_stats`` when set. Instances are
    created by :func:`enable_temperature` (class swap), never constructed directly.
    """

    def forward(
        self,
        hidden_states: torch.Tensor,
        residual: torch.Tensor,
        alibi: torch.Tensor,
        attention_mask: torch.Tensor | None,
        layer_past: Cache | None = None,
        use_cache: bool = False,
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        tau = module_tau(self)
        row_rule = isinstance(tau, RowScale)
        stats: AttentionStats | None = getattr(self, STATS_ATTR, None)
        if not row_rule and tau == 1.0 and stats is None:
            return super().forward(hidden_states, residual, alibi, attention_mask, layer_past=layer_past,
                                   use_cache=use_cache, output_attentions=output_attentions, **kwargs)
        if not row_rule and tau <= 0:
            raise ValueError(f"temperature must be positive, got τ={tau} on {type(self).__name__}")
        if stats is not None and self.training and self.attention_dropout.p > 0:
            raise ValueError("attention statistics need eval mode (attention dropout would perturb them)")

        batch, q_len, _ = hidden_states.shape
        heads, head_dim = self.num_heads, self.head_dim
        query, key, value = self._reshape(self.query_key_value(hidden_states))
        if layer_past is not None:
            key, value = layer_past.update(key, value, self.layer_idx)
        query = query.reshape(batch * heads, q_len, head_dim)
        key_t = key.reshape(batch * heads, -1, head_dim).transpose(-1, -2)
        value = value.reshape(batch * heads, -1, head_dim)
        k_len = key_t.shape[-1]
        mask = attention_mask
        if mask is not None and mask.dtype == torch.bool:  # defensive: BLOOM's eager mask is additive
            mask = torch.zeros(mask.shape, dtype=query.dtype, device=mask.device).masked_fill_(
                ~mask, torch.finfo(query.dtype).min)
        want_logits = stats is not None and stats.wants_logits(self)
        # one τ enters baddbmm's factors; a per-row rule multiplies each row of the τ = 1 logits by its λ_n
        beta, alpha = (self.beta, self.inv_norm_factor) if row_rule else (self.beta / tau, self.inv_norm_factor / tau)

        context = torch.empty_like(query)
        all_probs = (torch.empty(batch, heads, q_len, k_len, dtype=query.dtype, device=query.device)
                     if output_attentions else None)
        for q0 in range(0, q_len, QUERY_BLOCK):
            q1 = min(q0 + QUERY_BLOCK, q_len)
            bias = alibi if alibi.shape[-2] == 1 else alibi[:, q0:q1]
            # (beta·alibi + inv_norm_factor·QKᵀ)/τ in one baddbmm, exactly as stock BLOOM with τ = 1
            scores = bias.baddbmm(query[:, q0:q1], key_t, beta=beta, alpha=alpha).view(batch, heads, q1 - q0,
                                                                                      k_len)
            block_mask = None if mask is None else (mask if mask.shape[-2] == 1 else mask[..., q0:q1, :])
            if want_logits:  # raw logits l/τ before the mask (average logit vector, docs/design.md §5)
                from lengthx.attention.stats import validity_from_mask

                row_valid, key_valid = validity_from_mask(block_mask, batch, q1 - q0, k_len,
                                                          k_len - q_len + q0)
                stats.add_logits(self, scores, row_valid, key_valid, tau=1.0 if row_rule else tau)
            if row_rule:
                scores = temper(scores, tau, block_mask, torch.arange(k_len - q_len + q0, k_len - q_len + q1,
                                                                      device=scores.device), k_len, causal=True)
            if block_mask is not None:
                scores = scores + block_mask
            probs = F.softmax(scores, dim=-1, dtype=torch.float32)
            if stats is not None:
                stats.add(self, probs, block_mask, key_offset=k_len - q_len + q0)
            probs = self.attention_dropout(probs.to(query.dtype))
            if all_probs is not None:
                all_probs[:, :, q0:q1] = probs
            context[:, q0:q1] = torch.bmm(probs.reshape(batch * heads, q1 - q0, k_len), value)

        context = self._merge_heads(context)
        if self.pretraining_tp > 1 and self.slow_but_exact:  # as stock BLOOM (tensor-parallel exact sum)
            slices = self.hidden_size / self.pretraining_tp
            output = torch.zeros_like(context)
            for i in range(self.pretraining_tp):
                lo, hi = int(i * slices), int((i + 1) * slices)
                output = output + F.linear(context[:, :, lo:hi], self.dense.weight[:, lo:hi])
        else:
            output = self.dense(context)
        output = dropout_add(output, residual, self.hidden_dropout, self.training)
        return output, all_probs


def enable_temperature(model: nn.Module) -> list[nn.Module]:
    """Make every ``BloomAttention`` of ``model`` temperature-capable (in place, idempotent).

    Returns the self-attention modules in layer order (what ``set_temperature`` and ``AttentionStats``
    take). Until a τ ≠ 1 or statistics are set, the model computes exactly as stock.
    """
    for module in model.modules():
        if type(module) is BloomAttention:
            module.__class__ = TemperatureBloomAttention
    return attention_modules(model)


def disable_temperature(model: nn.Module) -> None:
    """Restore the stock ``BloomAttention`` class on every patched module (τ attributes are left alone)."""
    for module in model.modules():
        if type(module) is TemperatureBloomAttention:
            module.__class__ = BloomAttention
