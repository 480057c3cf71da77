"""Dispersal statistics of paper A (§3.3, §7): P_max and entropy over the encoder's attention rows,
layer 0's average logit vector (σ, l_max, QQ quantiles; Table 7, Figures 2/5) and T5's learned bias b_{m,n}
(Figure 1). :func:`capture_stats` runs the model once at a given τ with :class:`AttentionStats` attached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

STAT_METRICS = ("attn_pmax", "attn_entropy", "l0_pmax", "l0_sigma", "l0_lmax")


QQ_POINTS = 200


def learned_bias(model: torch.nn.Module, length: int) -> torch.Tensor:
    """b_{m,n} of every encoder head for m = length // 2 and n = 0…length−1 (paper A Figure 1): (H, length)."""
    attn = model.encoder.block[0].layer[0].SelfAttention
    m = length // 2
    rel = torch.arange(length) - m  # key − query, transformers' convention
    buckets = t5_relative_bucket(rel, True, attn.relative_attention_num_buckets, attn.relative_attention_max_distance)
    return attn.relative_attention_bias.weight.detach().float().cpu()[buckets].T


def capture_stats(
    loaded: Any, batches: Sequence[dict[str, Any]], tau: float | Sequence[float], scope: str = "encoder",
    **stats_kwargs: Any,
) -> Any:
    """One FINDS pass: run ``batches`` at temperature ``tau`` (one value, or one per watched module) and
    return the :class:`~lengthx.attention.stats.AttentionStats` of every attention module that carries τ.

    Only the attention that carries τ is run (the T5 encoder, or a decoder-only model's stack).
    """
    import torch

    from lengthx.attention.stats import AttentionStats
    from lengthx.attention.temperature import clear_temperature, set_temperature

    modules = loaded.family.temperature_modules(loaded.model, scope)
    set_temperature(modules, tau)
    try:
        with AttentionStats(modules, **stats_kwargs) as stats, torch.no_grad():
            for batch in batches:
                if loaded.family.encoder_decoder:
                    loaded.model.get_encoder()(**batch)
                else:
                    loaded.model(**batch)
        return stats
    finally:
        clear_temperature(modules)


def layer0_statistics(loaded: Any, batches: Sequence[dict[str, Any]], scope: str = "encoder") -> dict[str, float]:
    """Layer 0 at τ = 1 (paper A §7): mean P_max of layer 0, and σ, l_max of its average logit vector."""
    stats = capture_stats(loaded, batches, 1.0, scope, logit_vector=True)
    return {"pmax": float(stats.pmax()[0].mean()), "sigma": stats.logit_sigma(), "l_max": stats.logit_lmax()}


def t5_relative_bucket(
    relative_position: torch.Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """Bucket of each relative position (key − query), paper A §3.2's b_{m,n} index.

    Half of the buckets (per direction when bidirectional) hold exact offsets 0…max_exact−1; the other half
    cover [max_exact, max_distance) logarithmically; every offset ≥ max_distance shares the last bucket,
    which is why inputs longer than the training length add no new bucket. Positive offsets (keys after the
    query) use the upper half when bidirectional; a causal decoder maps every positive offset to bucket 0.
    """
    rel = relative_position.long()
    offset = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        offset = (rel > 0).long() * num_buckets
        distance = rel.abs()
    else:
        distance = (-rel).clamp(min=0)
    max_exact = num_buckets // 2
    # log-spaced part, computed in float64 then truncated toward zero, as T5 does
    log_ratio = torch.log(distance.clamp(min=1).double() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).to(torch.long)
    large = large.clamp(max=num_buckets - 1)
    return offset + torch.where(distance < max_exact, distance, large)
