"""Position encodings: T5 relative buckets (paper A §3.2), APE interpolation and ALiBi (paper B, DESIGN §5)."""

from __future__ import annotations

import math

import torch


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
