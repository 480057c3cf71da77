"""Temperatures of paper A: the grid and Algorithm 1 (§4), log scaling (§5), Propositions 1-2 (§7, A.2-A.3).

Algorithm 1 picks τ_ex from :data:`TEMPERATURE_GRID` so that the mean maximum probability (or entropy) of
the encoder's attention at the extrapolation length matches its value at the training length with τ = 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

TEMPERATURE_GRID: tuple[float, ...] = tuple(round(1.0 - 0.05 * i, 2) for i in range(11))  # 1.0, 0.95, …, 0.5
MODES = ("pmax", "entropy")


def log_temperature(l_ex: float, l_tr: float) -> float:
    """τ = log L_tr / log L_ex = log_{L_ex} L_tr (Yao et al. 2021; Su 2021); 1 when L_ex ≤ L_tr."""
    if l_ex <= 0 or l_tr <= 1:
        raise ValueError(f"lengths must be positive with L_tr > 1, got L_ex={l_ex}, L_tr={l_tr}")
    return 1.0 if l_ex <= l_tr else math.log(l_tr) / math.log(l_ex)


def prop1_temperature(l_tr: float, l_ex: float, pmax_tr: float, sigma_tr: float, sigma_ex: float) -> float:
    """Proposition 1 (P_max alignment): the larger root of Aτ² − Bτ + C = 0, i.e. the fixed point of
    τ = B / (A + C/τ²), with A = log L_ex + log P_tr, B = log L_tr + log P_tr + σ_tr²/2, C = σ_ex²/2.

    Returns NaN when the quadratic has no real root (the Gaussian approximation breaks down there).
    """
    a = math.log(l_ex) + math.log(pmax_tr)
    b = math.log(l_tr) + math.log(pmax_tr) + sigma_tr**2 / 2
    c = sigma_ex**2 / 2
    disc = b * b - 4 * a * c
    if a == 0 or disc < 0:
        return math.nan
    return (b + math.sqrt(disc)) / (2 * a)


def prop2_temperature(l_tr: float, l_ex: float, sigma_tr: float, sigma_ex: float) -> float:
    """Proposition 2 (entropy alignment): τ = σ_ex / sqrt(σ_tr² + 2 log(L_ex / L_tr))."""
    denom = sigma_tr**2 + 2 * math.log(l_ex / l_tr)
    if denom <= 0:
        return math.nan
    return sigma_ex / math.sqrt(denom)


@dataclass
class Alignment:
    """Result of Algorithm 1: the chosen τ, the target S̄_tr(1), and every S̄_ex(τ) evaluated."""

    tau: float
    target: float
    evaluated: dict[float, float] = field(default_factory=dict)

    @property
    def forward_passes(self) -> int:
        return len(self.evaluated)


def align_temperature(
    statistic: Callable[[float], float],
    target: float,
    mode: str,
    search: str = "grid",
    grid: Sequence[float] = TEMPERATURE_GRID,
) -> Alignment:
    """Algorithm 1: the grid τ whose S̄_ex(τ) is closest to ``target`` = S̄_tr(1).

    ``search="grid"`` evaluates every grid point (the paper). ``search="bisect"`` uses that S̄ is monotone
    in τ (P_max falls and entropy rises as τ grows) to binary-search the crossing on the grid, then picks the
    closer of its two neighbours: the same objective with about log2(len(grid)) + 1 forward passes.
    """
    if mode not in MODES:
        raise ValueError(f"unknown alignment mode {mode!r}; valid: {', '.join(MODES)}")
    cache: dict[float, float] = {}

    def s(tau: float) -> float:
        if tau not in cache:
            cache[tau] = float(statistic(tau))
        return cache[tau]

    taus = sorted(grid, reverse=True)  # 1.0 → 0.5: P_max rises, entropy falls along the list
    if search == "grid":
        candidates = taus
        for t in taus:
            s(t)
    elif search == "bisect":
        sign = 1.0 if mode == "pmax" else -1.0
        lo, hi = 0, len(taus)  # first index with sign·(S − target) ≥ 0, in [0, len]
        while lo < hi:
            mid = (lo + hi) // 2
            if sign * (s(taus[mid]) - target) >= 0:
                hi = mid
            else:
                lo = mid + 1
        candidates = [taus[i] for i in (lo - 1, lo) if 0 <= i < len(taus)]
        for t in candidates:
            s(t)
    else:
        raise ValueError(f"unknown search={search!r}; valid: grid, bisect")
    best = min(candidates, key=lambda t: (abs(cache[t] - target), -t))
    return Alignment(tau=best, target=target, evaluated=dict(sorted(cache.items(), reverse=True)))


# ---- Algorithm 1 on a model: FindS and the calibration cache ----------------------------------------------


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


def find_s(
    loaded: Any, batches: Sequence[dict[str, Any]], tau: float, mode: str, scope: str = "encoder",
    row_stride: int = 1,
) -> float:
    """FINDS(τ, M) of Algorithm 1: S̄ over all watched layers, heads and valid query rows of ``batches``
    (every ``row_stride``-th query row when > 1: an estimate at a fraction of the cost)."""
    return capture_stats(loaded, batches, tau, scope, row_stride=row_stride).mean(mode)


def calibrate(
    loaded: Any,
    reference: Sequence[dict[str, Any]],
    extrapolation: Sequence[dict[str, Any]],
    mode: str,
    scope: str = "encoder",
    search: str = "grid",
    row_stride: int = 1,
) -> Alignment:
    """Algorithm 1 end to end: S̄_tr(1) on length-L_tr batches, then τ_ex on the extrapolation batches."""
    target = find_s(loaded, reference, 1.0, mode, scope, row_stride)
    return align_temperature(lambda t: find_s(loaded, extrapolation, t, mode, scope, row_stride), target, mode,
                             search)


def _per_layer(stats: Any, mode: str) -> list[float]:
    per_head = stats.pmax() if mode == "pmax" else stats.entropy()
    return [float(x) for x in per_head.mean(1)]


def calibrate_per_layer(
    loaded: Any,
    reference: Sequence[dict[str, Any]],
    extrapolation: Sequence[dict[str, Any]],
    mode: str,
    scope: str = "encoder",
    search: str = "grid",
    row_stride: int = 1,
) -> list[Alignment]:
    """Per-layer Algorithm 1 (paper A, Limitations: proposed as future work): one τ per attention module.

    Layer ℓ's τ is aligned with layers < ℓ already at their chosen τ (a layer's statistic does not depend on
    the layers after it), so the layers are aligned one after another, each by the same grid/bisect search.
    """
    targets = _per_layer(capture_stats(loaded, reference, 1.0, scope, row_stride=row_stride), mode)
    taus = [1.0] * len(targets)
    out = []
    for layer, target in enumerate(targets):
        def statistic(t: float, layer: int = layer) -> float:
            trial = taus[:layer] + [t] + taus[layer + 1:]
            return _per_layer(capture_stats(loaded, extrapolation, trial, scope, row_stride=row_stride), mode)[layer]

        result = align_temperature(statistic, target, mode, search)
        taus[layer] = result.tau
        out.append(result)
    return out


def layer0_statistics(loaded: Any, batches: Sequence[dict[str, Any]], scope: str = "encoder") -> dict[str, float]:
    """Layer 0 at τ = 1 (paper A §7): mean P_max of layer 0, and σ, l_max of its average logit vector."""
    stats = capture_stats(loaded, batches, 1.0, scope, logit_vector=True)
    return {"pmax": float(stats.pmax()[0].mean()), "sigma": stats.logit_sigma(), "l_max": stats.logit_lmax()}


def closed_form_temperature(
    loaded: Any,
    reference: Sequence[dict[str, Any]],
    extrapolation: Sequence[dict[str, Any]],
    proposition: str,
    l_ex: float,
    scope: str = "encoder",
) -> tuple[float, dict[str, Any]]:
    """τ of Proposition 1 (``prop1``) or 2 (``prop2``) from layer-0 statistics at L_tr and at L_ex.

    The closed forms are applied as they are (not snapped to the grid). Raises ValueError where the
    Gaussian approximation has no solution (Prop. 1's quadratic without a real root).
    """
    tr = layer0_statistics(loaded, reference, scope)
    ex = layer0_statistics(loaded, extrapolation, scope)
    if proposition == "prop1":
        tau = prop1_temperature(loaded.l_tr, l_ex, tr["pmax"], tr["sigma"], ex["sigma"])
    elif proposition == "prop2":
        tau = prop2_temperature(loaded.l_tr, l_ex, tr["sigma"], ex["sigma"])
    else:
        raise ValueError(f"unknown proposition {proposition!r}; valid: prop1, prop2")
    if math.isnan(tau) or tau <= 0:
        raise ValueError(f"{proposition} has no positive solution for L_ex={l_ex:.0f} with layer-0 statistics "
                         f"train={tr}, extrapolation={ex}; the Gaussian approximation does not hold here")
    return tau, {"train": tr, "extrapolation": ex}
