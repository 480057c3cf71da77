"""Attention-scaling rules from the length-extrapolation literature, as softmax temperatures τ
(docs/design.md §5: scores become softmax(l·λ + mask) with λ = 1/τ and l = QKᵀ·scaling + bias).

With s = L_ex / L_tr, the extension factor:

* **YaRN** (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models"):
  sqrt(1/t) = 0.1·ln(s) + 1, the ``mscale`` that multiplies both cos and sin of RoPE, so q·k and with it every
  logit is multiplied by mscale²: τ = t = 1/mscale² (τ = 1 for s ≤ 1).
* **LongRoPE** (Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens"; the
  attention factor of its reference implementation, Phi-3): sqrt(1 + ln s / ln L_tr), also applied to cos and
  sin, so τ = 1/factor² = ln L_tr / ln L_ex — paper A's log rule τ = log_{L_ex} L_tr.
* **logn** (Qwen; Bai et al. 2023, "Qwen Technical Report", LogN-Scaling): each query is multiplied by
  log_{L_tr}(i) when i > L_tr, else 1, with i the query's 1-based position (Qwen's ``logn_list`` index + 1).
  A per-row τ_i = 1/log_{L_tr}(i).
* **SSMax** (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention"): softmax(s·log(n)·z) over the n
  keys a query sees, s a learned scalar. Used here without training: s = 1/ln L_tr, fitted so that the scale
  is 1 at n = L_tr. Then s·ln n = log_{L_tr}(n): the logn scale, but also below L_tr (where it is < 1).

Per-row convention (logn, SSMax): a query row's n is the number of keys it attends to, counted from the mask
(keys whose additive mask is not the dtype's minimum). Under causal self-attention without padding the query
at 0-based position p sees n = p + 1 keys, so n is Qwen's 1-based position i, and with left padding n counts
the row's real tokens (its position among them). :class:`RowScale` returns the logit multiplier λ_n = 1/τ_n,
which stays finite where τ would not (SSMax at n = 1: λ = 0, one key, probability 1 whatever the scale).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ROW_RULES = ("logn", "ssmax")


def _factor(l_ex: float, l_tr: float) -> float:
    """s = L_ex / L_tr, checking the lengths."""
    if l_ex <= 0 or l_tr <= 1:
        raise ValueError(f"lengths must be positive with L_tr > 1, got L_ex={l_ex}, L_tr={l_tr}")
    return l_ex / l_tr


def yarn_mscale(l_ex: float, l_tr: float) -> float:
    """YaRN's mscale = 0.1·ln(s) + 1 for s = L_ex/L_tr > 1, else 1 (the factor on cos and sin)."""
    s = _factor(l_ex, l_tr)
    return 0.1 * math.log(s) + 1.0 if s > 1 else 1.0


def yarn_temperature(l_ex: float, l_tr: float) -> float:
    """τ = 1/mscale²: the logits q·k scale by mscale² when cos and sin both carry mscale."""
    return 1.0 / yarn_mscale(l_ex, l_tr) ** 2


def longrope_factor(l_ex: float, l_tr: float) -> float:
    """LongRoPE's attention factor sqrt(1 + ln s / ln L_tr) for s = L_ex/L_tr > 1, else 1."""
    s = _factor(l_ex, l_tr)
    return math.sqrt(1.0 + math.log(s) / math.log(l_tr)) if s > 1 else 1.0


def longrope_temperature(l_ex: float, l_tr: float) -> float:
    """τ = 1/factor² = ln L_tr / ln L_ex (paper A's log rule, by algebra)."""
    return 1.0 / longrope_factor(l_ex, l_tr) ** 2


@dataclass(frozen=True)
class RowScale:
    """A τ per query row: logit multiplier λ_n = 1/τ_n of the ``rule`` (``logn`` or ``ssmax``) at training
    length ``l_tr``, as a function of n, the number of keys the row attends to (module docstring)."""

    rule: str
    l_tr: int

    def __post_init__(self) -> None:
        if self.rule not in ROW_RULES:
            raise ValueError(f"unknown per-row rule {self.rule!r}; valid: {', '.join(ROW_RULES)}")
        if self.l_tr <= 1:
            raise ValueError(f"L_tr must be above 1, got {self.l_tr}")

    def scale(self, n: torch.Tensor) -> torch.Tensor:
        """λ_n (float32): log_{L_tr} n where the rule applies (logn: n > L_tr; ssmax: every n ≥ 1), else 1."""
        n = n.to(torch.float32).clamp(min=1.0)
        log_base = n.log() / math.log(self.l_tr)
        return log_base if self.rule == "ssmax" else torch.where(n > self.l_tr, log_base, torch.ones_like(n))

    def tau(self, n: int) -> float:
        """τ_n = 1/λ_n of a row that sees ``n`` keys (``inf`` for SSMax at n = 1)."""
        lam = float(self.scale(torch.tensor(float(n))))
        return math.inf if lam == 0 else 1.0 / lam

    @property
    def label(self) -> str:
        """How records and result rows name this τ (it is one per row, not one number)."""
        return f"{self.rule}(L_tr={self.l_tr})"


def keys_seen(mask: torch.Tensor | None, positions: torch.Tensor, k_len: int, causal: bool) -> torch.Tensor:
    """n of each query row, shaped to broadcast over a (B, H, rows, K) score block: the keys its additive
    ``mask`` block (B, 1|H, rows|1, K) leaves open; without a mask, ``positions`` + 1 under causal attention
    (``positions``: the rows' 0-based places among the keys) or all ``k_len`` keys."""
    if mask is not None:
        return (mask > torch.finfo(mask.dtype).min / 2).sum(-1, keepdim=True)
    if causal:
        return (positions + 1).reshape(1, 1, -1, 1)
    return torch.full((1, 1, 1, 1), k_len, device=positions.device)


def temper(scores: torch.Tensor, tau: float | RowScale, mask: torch.Tensor | None, positions: torch.Tensor,
           k_len: int, causal: bool) -> torch.Tensor:
    """``scores`` (B, H, rows, K) before the mask, at temperature ``tau``: divided by one τ, or multiplied by
    each row's λ_n (:class:`RowScale`; ``mask``, ``positions``, ``k_len`` and ``causal`` give n)."""
    if isinstance(tau, RowScale):
        return scores * tau.scale(keys_seen(mask, positions, k_len, causal)).to(scores.dtype)
    return scores / tau
