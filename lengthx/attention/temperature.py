"""Softmax temperature inside attention (paper A §4, docs/design.md §5).

Scores become softmax(l / τ) with l = QKᵀ·scaling + position bias; the padding (and causal) mask is added
*after* the division, so it is never scaled. The operation is one attention function, registered with
transformers' ``AttentionInterface`` and ``AttentionMaskInterface`` under :data:`ATTN_NAME`, that reads τ
from the attention module it serves. Modules without a τ (or with τ = 1 and no statistics requested) go
through stock SDPA unchanged, so τ = 1 is bit-identical to stock transformers.

Any family whose attention dispatches through ``AttentionInterface`` (T5, GPT-2, GPT-NeoX, LLaMA) is served
by the same function; which modules receive τ is decided by the family adapter (``lengthx.models.families``).
When T5's ``position_bias`` is a table of relative offsets (``lengthx.attention.t5_bias``, docs/design.md §9)
rather than a tensor, the call is handed to that object's memory-efficient path, with the same τ and
statistics semantics.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, bidirectional_mask_function, sdpa_mask

from lengthx.attention.scaling import RowScale, temper
from lengthx.attention.stats import STATS_ATTR, AttentionStats
from lengthx.config import is_number

ATTN_NAME = "lengthx"
TAU_ATTR = "lengthx_tau"
QUERY_BLOCK = 1024  # explicit-softmax path: scores of at most this many query rows exist at once


def _to_additive(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Boolean keep-mask (SDPA convention) → additive float mask; float masks pass through."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)


def _causal_additive(q_len: int, k_len: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Bottom-right aligned causal mask, as a decoder with ``k_len - q_len`` cached tokens needs."""
    q_pos = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    k_pos = torch.arange(k_len, device=device)[None, :]
    out = torch.zeros(q_len, k_len, dtype=dtype, device=device)
    return out.masked_fill_(k_pos > q_pos, torch.finfo(dtype).min)[None, None]


def _rows(t: torch.Tensor | None, q0: int, q1: int) -> torch.Tensor | None:
    """Query rows [q0, q1) of a (…, Q, K) bias or mask that may broadcast over queries."""
    if t is None or t.shape[-2] == 1:
        return t
    return t[..., q0:q1, :]


@dataclass(frozen=True)
class AttentionCall:
    """One call of the registered attention function: the arguments transformers' ``AttentionInterface``
    passes (``position_bias``: T5's bias tensor, or the offset table of ``lengthx.attention.t5_bias``), with
    the τ and the statistics (if any) read from the module. Every path that computes the call takes it whole:
    SDPA, the query-blocked explicit softmax below, and ``RelativeBiasTable.attend``."""

    module: torch.nn.Module
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float | None = None
    dropout: float = 0.0
    position_bias: Any = None
    tau: float | RowScale = 1.0
    stats: AttentionStats | None = None


def module_tau(module: torch.nn.Module) -> float | RowScale:
    """The τ a module carries: one number (default 1) or a per-row rule (:class:`~lengthx.attention.scaling.RowScale`)."""
    tau = getattr(module, TAU_ATTR, 1.0)
    return tau if isinstance(tau, RowScale) else float(tau)


def temperature_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention with softmax((QKᵀ·scaling + bias)/τ + mask); the ``AttentionInterface`` entry of lengthx.

    τ is ``module.lengthx_tau`` (default 1), or a per-row rule whose τ depends on the keys each query row
    sees (:class:`~lengthx.attention.scaling.RowScale`: logn, SSMax). When ``module.lengthx_stats`` holds an
    :class:`~lengthx.attention.stats.AttentionStats`, P_max and entropy of every valid query row are
    accumulated from the same scores (Algorithm 1's FindS), block by block over queries.
    """
    call = AttentionCall(module, query, key, value, attention_mask, scaling, dropout, position_bias,
                         tau=module_tau(module), stats=getattr(module, STATS_ATTR, None))
    stats = call.stats
    if (stats is not None and stats.row_stride > 1 and not stats.wants_logits(module)
            and not (getattr(position_bias, "lengthx_efficient", False) and position_bias.fuses_statistics(call))):
        sampled_statistics(call)
        call = replace(call, stats=None)
    return _attend(call, **kwargs)


def _attend(call: AttentionCall, **kwargs) -> tuple[torch.Tensor, None]:
    """The attention output at ``call.tau``, feeding ``call.stats`` (if any) from every query row."""
    module, query, key, value, tau, stats = call.module, call.query, call.key, call.value, call.tau, call.stats
    position_bias, scaling = call.position_bias, call.scaling
    row_rule = isinstance(tau, RowScale)
    if getattr(position_bias, "lengthx_efficient", False):  # T5 offset table (lengthx.attention.t5_bias)
        if row_rule:
            raise ValueError(f"the per-row rule {tau.label} is not implemented in T5's offset-table attention; "
                             "use attention.efficient=never")
        return position_bias.attend(call), None
    if not row_rule and tau == 1.0 and stats is None:
        return sdpa_attention_forward(
            module, query, key, value, call.attention_mask, dropout=call.dropout, scaling=scaling,
            position_bias=position_bias, **kwargs,
        )
    if not row_rule and tau <= 0:
        raise ValueError(f"temperature must be positive, got τ={tau} on {type(module).__name__}")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    causal = bool(getattr(module, "is_causal", False))
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # grouped-query attention (LLaMA-style): repeat K/V heads
        key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    q_len, k_len = query.shape[-2], key.shape[-2]
    mask = _to_additive(call.attention_mask, query.dtype)
    if mask is None and causal and q_len > 1:
        mask = _causal_additive(q_len, k_len, query.dtype, query.device)
    key_t = key.transpose(-1, -2)
    want_logits = stats is not None and stats.wants_logits(module)
    out = torch.empty_like(query)
    for q0 in range(0, q_len, QUERY_BLOCK):
        q1 = min(q0 + QUERY_BLOCK, q_len)
        scores = torch.matmul(query[:, :, q0:q1], key_t) * scaling
        bias = _rows(position_bias, q0, q1)
        if bias is not None:
            scores = scores + bias
        block_mask = _rows(mask, q0, q1)
        if want_logits:  # raw logits l, before τ and mask (average logit vector, docs/design.md §5)
            from lengthx.attention.stats import validity_from_mask

            row_valid, key_valid = validity_from_mask(block_mask, scores.shape[0], q1 - q0, k_len,
                                                      k_len - q_len + q0)
            stats.add_logits(module, scores, row_valid, key_valid, tau=1.0)
        scores = temper(scores, tau, block_mask, torch.arange(k_len - q_len + q0, k_len - q_len + q1,
                                                              device=query.device), k_len, causal)
        if block_mask is not None:
            scores = scores + block_mask
        probs = torch.softmax(scores.float(), dim=-1)
        if stats is not None:
            stats.add(module, probs, block_mask, key_offset=k_len - q_len + q0)
        probs = torch.nn.functional.dropout(probs, p=call.dropout, training=module.training)
        out[:, :, q0:q1] = torch.matmul(probs.to(value.dtype), value)
    return out.transpose(1, 2).contiguous(), None


def sampled_statistics(call: AttentionCall) -> None:
    """P_max and entropy of softmax(l/τ) for every ``stats.row_stride``-th query row only (self-attention).

    The scores of those rows are computed explicitly, (B, H, L/stride, L) at most, so statistics cost a
    fraction of a forward pass; the rows are evenly spaced, so their mean estimates Algorithm 1's S̄.
    """
    module, query, key, position_bias, stats = call.module, call.query, call.key, call.position_bias, call.stats
    scaling = query.shape[-1] ** -0.5 if call.scaling is None else call.scaling
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, 1)
    q_len, k_len = query.shape[-2], key.shape[-2]
    rows = torch.arange(0, q_len, stats.row_stride, device=query.device)
    scores = torch.matmul(query[:, :, rows], key.transpose(-1, -2)) * scaling
    if getattr(position_bias, "lengthx_efficient", False):  # T5 offset table: T[h, k − q + L_q − 1]
        k = torch.arange(k_len, device=query.device)[None, :]
        scores = scores + position_bias.table.to(scores)[:, k - rows[:, None] + q_len - 1][None]
    elif position_bias is not None:
        scores = scores + (position_bias if position_bias.shape[-2] == 1 else position_bias[..., rows, :])
    mask = _to_additive(call.attention_mask, scores.dtype)
    own_key = rows + (k_len - q_len)  # each row's own position among the keys
    causal = bool(getattr(module, "is_causal", False))
    mask_rows = None if mask is None else (mask if mask.shape[-2] == 1 else mask[..., rows, :])
    scores = temper(scores, call.tau, mask_rows, own_key, k_len, causal)
    if mask is None:
        valid = torch.ones(scores.shape[0], rows.numel(), dtype=torch.bool, device=query.device)
        if causal and q_len > 1:
            future = torch.arange(k_len, device=query.device)[None, :] > own_key[:, None]
            scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
    else:
        scores = scores + mask_rows
        diag = mask_rows[:, 0, torch.arange(rows.numel()) if mask_rows.shape[-2] > 1 else 0, own_key]
        valid = diag > torch.finfo(mask_rows.dtype).min / 2
    probs = torch.softmax(scores.float(), dim=-1)
    stats.add_rows(module, probs.amax(-1), torch.special.entr(probs).sum(-1), valid.reshape(scores.shape[0], -1))


def lengthx_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Callable | None = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor | None:
    """transformers' ``sdpa_mask``, except that a plain bidirectional (padding-only) mask is returned as a
    (B, 1, L_q, L_k) *view* broadcast over queries instead of a materialised tensor: the same values for
    every consumer, without L_q·L_k bytes per example at long lengths (docs/design.md §9)."""
    if mask_function is None:
        return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset,
                         attention_mask=attention_mask, **kwargs)
    if mask_function is bidirectional_mask_function and q_length > 1 and not kwargs.get("use_vmap", False):
        mask = sdpa_mask(batch_size, 1, kv_length, q_offset, kv_offset, mask_function, attention_mask,
                         **kwargs)
        return None if mask is None else mask.expand(mask.shape[0], mask.shape[1], q_length, kv_length)
    return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask,
                     **kwargs)


def register() -> None:
    """Register :data:`ATTN_NAME` with transformers (idempotent). The mask function must be registered too,
    otherwise transformers builds no mask for an unknown name and padding is silently ignored."""
    AttentionInterface.register(ATTN_NAME, temperature_attention)
    AttentionMaskInterface.register(ATTN_NAME, lengthx_mask)


def check_temperature(tau: Any) -> float:
    """``tau`` as a float, or a ValueError naming it: a real number (not text, not a bool), finite and above 0."""
    if isinstance(tau, bool) or not isinstance(tau, numbers.Real):
        example = f" (as a number: tau={tau.strip()})" if isinstance(tau, str) and is_number(tau) else ""
        raise ValueError(f"τ must be a number, got tau={tau!r} ({type(tau).__name__}){example}")
    value = float(tau)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"τ must be a finite number above 0, got tau={value!r} (e.g. tau=0.8)")
    return value


def set_temperature(modules: Sequence[torch.nn.Module], tau: float | Sequence[float] | RowScale) -> None:
    """Give each attention module its τ: one value for all, one per module (per-layer alignment), or one
    per-row rule for all (:class:`~lengthx.attention.scaling.RowScale`). A τ that is not a finite number above
    0 (text, NaN, a bool) is a ValueError naming it, and nothing is set."""
    if isinstance(tau, RowScale):
        for module in modules:
            setattr(module, TAU_ATTR, tau)
        return
    if isinstance(tau, str | bytes | numbers.Real):
        taus = [check_temperature(tau)] * len(modules)
    elif isinstance(tau, Sequence):
        taus = [check_temperature(t) for t in tau]
    else:
        raise ValueError(f"τ must be a number or one number per attention module, got tau={tau!r}")
    if len(taus) != len(modules):
        raise ValueError(f"got {len(taus)} temperatures for {len(modules)} attention modules")
    for module, t in zip(modules, taus, strict=True):
        setattr(module, TAU_ATTR, t)


def clear_temperature(modules: Sequence[torch.nn.Module]) -> None:
    """Remove τ from the modules (back to τ = 1)."""
    for module in modules:
        if hasattr(module, TAU_ATTR):
            delattr(module, TAU_ATTR)


def saved_temperature(modules: Sequence[torch.nn.Module]) -> list[Any]:
    """What τ each module carries now (None: none), for :func:`restore_temperature`."""
    return [getattr(module, TAU_ATTR, None) for module in modules]


def restore_temperature(modules: Sequence[torch.nn.Module], saved: Sequence[Any]) -> None:
    """Give each module back the τ :func:`saved_temperature` found on it (none where it had none)."""
    for module, tau in zip(modules, saved, strict=True):
        if tau is None:
            if hasattr(module, TAU_ATTR):
                delattr(module, TAU_ATTR)
        else:
            setattr(module, TAU_ATTR, tau)
