"""Attention statistics for Algorithm 1 (paper A §4): mean P_max and entropy of softmax(l/τ).

An :class:`AttentionStats` is attached to the attention modules it watches; the temperature attention
function (``lengthx.attention.temperature``) feeds it one query block at a time, so no more than one
block of scores ever exists. Only *valid* query rows count (a padding token's own row is skipped), and
masked keys carry zero probability, so they drop out of both statistics.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lengthx.attention.temperature import STATS_ATTR


class AttentionStats:
    """Per (layer, head) sums of P_max and entropy H over valid query rows, for the modules given."""

    def __init__(self, modules: Sequence[torch.nn.Module]):
        self.modules = list(modules)
        self._index = {id(m): i for i, m in enumerate(self.modules)}
        self._pmax: torch.Tensor | None = None  # (layers, heads), float64 sums
        self._entropy: torch.Tensor | None = None
        self._rows = torch.zeros(len(self.modules), dtype=torch.float64)

    def __enter__(self) -> AttentionStats:
        for m in self.modules:
            setattr(m, STATS_ATTR, self)
        return self

    def __exit__(self, *exc: object) -> None:
        for m in self.modules:
            if getattr(m, STATS_ATTR, None) is self:
                delattr(m, STATS_ATTR)

    def add(
        self,
        module: torch.nn.Module,
        probs: torch.Tensor,
        mask: torch.Tensor | None,
        key_offset: int,
    ) -> None:
        """Accumulate a block: ``probs`` (B, H, q, K); query row i is position ``key_offset + i`` among keys.

        A row is valid when its own position is an unmasked key (self-attention: padding is shared).
        """
        layer = self._index[id(module)]
        b, h, q, _ = probs.shape
        if mask is None:
            valid = torch.ones(b, q, dtype=torch.bool, device=probs.device)
        else:
            rows = torch.arange(q, device=probs.device)
            row_idx = rows if mask.shape[-2] > 1 else torch.zeros_like(rows)
            diag = mask[:, 0, row_idx, key_offset + rows]  # (B, q)
            valid = diag > torch.finfo(mask.dtype).min / 2
        pmax = probs.amax(-1)  # (B, H, q)
        entropy = torch.special.entr(probs).sum(-1)
        w = valid[:, None, :].to(torch.float64)
        pm, en = (pmax.double() * w).sum((0, 2)), (entropy.double() * w).sum((0, 2))
        if self._pmax is None:
            self._pmax = torch.zeros(len(self.modules), h, dtype=torch.float64)
            self._entropy = torch.zeros(len(self.modules), h, dtype=torch.float64)
        self._pmax[layer] += pm.cpu()
        self._entropy[layer] += en.cpu()
        self._rows[layer] += float(valid.sum())

    def _per_head(self, sums: torch.Tensor | None) -> torch.Tensor:
        if sums is None or bool((self._rows == 0).any()):
            raise RuntimeError("no attention statistics were recorded for some watched module: run a forward pass "
                               "with the lengthx attention implementation first")
        return sums / self._rows[:, None]

    def pmax(self) -> torch.Tensor:
        """Mean P_max per (layer, head)."""
        return self._per_head(self._pmax)

    def entropy(self) -> torch.Tensor:
        """Mean entropy (nats) per (layer, head)."""
        return self._per_head(self._entropy)

    def mean(self, mode: str) -> float:
        """S̄ of Algorithm 1: the mean over layers, heads and valid query rows (mode ``pmax`` or ``entropy``)."""
        per_head = {"pmax": self.pmax, "entropy": self.entropy}[mode]()
        return float(per_head.mean())
