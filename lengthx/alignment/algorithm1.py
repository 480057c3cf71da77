"""Algorithm 1 of paper A (§4): the temperature that aligns attention dispersal at L_ex with L_tr's.

:func:`align_temperature` picks τ_ex from :data:`TEMPERATURE_GRID` (or by bisection) so that the mean maximum
probability (or entropy) S̄_ex(τ) of the calibration examples at L_ex matches S̄_tr(1) at the training length;
:func:`calibrate` runs it on a loaded model, :func:`calibrate_per_layer` once per attention layer, both as
:class:`CalibrationOptions` say.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lengthx.alignment.statistics import capture_stats

TEMPERATURE_GRID: tuple[float, ...] = tuple(round(1.0 - 0.05 * i, 2) for i in range(11))  # 1.0, 0.95, …, 0.5
PAPER_TAU_MIN = 0.5  # the paper's grid floor (§4, Algorithm 1)


def temperature_grid(tau_min: float = PAPER_TAU_MIN) -> tuple[float, ...]:
    """The grid 1.0, 0.95, … down to ``tau_min`` (the paper's :data:`TEMPERATURE_GRID` at 0.5; a lower floor is
    an extension, ``method.tau_min``)."""
    if not 0.0 < tau_min < 1.0:
        raise ValueError(f"tau_min={tau_min}: the grid's floor must lie between 0 and 1, e.g. 0.2")
    return tuple(round(1.0 - 0.05 * i, 2) for i in range(int(round((1.0 - tau_min) / 0.05)) + 1))

log = logging.getLogger("lengthx")


MODES = ("pmax", "entropy")
Batches = Sequence[dict[str, Any]]  # encoded examples, one dict of model inputs each


@dataclass
class Alignment:
    """Result of Algorithm 1: the chosen τ, the target S̄_tr(1), and every S̄_ex(τ) evaluated."""

    tau: float
    target: float
    evaluated: dict[float, float] = field(default_factory=dict)
    bounds: tuple[float, float] = (PAPER_TAU_MIN, 1.0)  # the grid's ends

    @property
    def forward_passes(self) -> int:
        return len(self.evaluated)

    def short_of_target(self, mode: str) -> bool:
        """Whether τ sits at an end of its grid and S̄_ex(τ) has not reached the target there: at the floor,
        P_max still below S̄_tr(1) (entropy above it); at 1.0, P_max already above it (entropy below). Such a τ
        is the grid's end, not an alignment (docs/mini-t5-study.md marks it ``*``)."""
        value = self.evaluated.get(self.tau)
        if value is None or self.tau not in self.bounds:
            return False
        sign = 1.0 if mode == "pmax" else -1.0  # P_max rises and entropy falls as τ falls
        gap = sign * (value - self.target)
        return gap < 0 if self.tau == min(self.bounds) else gap > 0


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
            log.info("Algorithm 1 (%s): τ=%.2f gives S̄_ex=%.4f (target S̄_tr(1)=%.4f)", mode, tau, cache[tau], target)
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
    return Alignment(tau=best, target=target, evaluated=dict(sorted(cache.items(), reverse=True)),
                     bounds=(min(taus), max(taus)))


def find_s(loaded: Any, batches: Batches, tau: float, mode: str, scope: str = "encoder", row_stride: int = 1) -> float:
    """FINDS(τ, M) of Algorithm 1: S̄ over all watched layers, heads and valid query rows of ``batches``
    (every ``row_stride``-th query row when > 1: an estimate at a fraction of the cost)."""
    return capture_stats(loaded, batches, tau, scope, row_stride=row_stride).mean(mode)


@dataclass(frozen=True)
class CalibrationOptions:
    """How Algorithm 1 measures and searches (config ``method`` and ``calibration.row_stride``).

    ``mode``: the statistic S̄, ``pmax`` or ``entropy``; ``scope``: the attention modules that get τ and are
    watched (``encoder`` …); ``search``: ``grid`` (the paper) or ``bisect``; ``row_stride``: every
    ``row_stride``-th query row only (> 1: an estimate at a fraction of the cost); ``tau_min``: the grid's floor
    (:func:`temperature_grid`; the paper's 0.5, lower is an extension).
    """

    mode: str
    scope: str = "encoder"
    search: str = "grid"
    row_stride: int = 1
    tau_min: float = PAPER_TAU_MIN

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown alignment mode {self.mode!r}; valid: {', '.join(MODES)}")

    def capture(self, loaded: Any, batches: Batches, tau: float | Sequence[float]) -> Any:
        """The attention statistics of ``batches`` at ``tau`` (one value, or one per watched module)."""
        return capture_stats(loaded, batches, tau, self.scope, row_stride=self.row_stride)


def options_from_config(method: Any, calibration: Any) -> CalibrationOptions:
    """Algorithm 1's options from a run's config ``method`` (mode, scope, search, ``tau_min``) and ``calibration``
    (``row_stride``): the one place both paper A's runs and paper B's perplexity read them."""
    return CalibrationOptions(str(method.name), str(method.get("scope") or "encoder"),
                              str(method.get("search") or "grid"), int(calibration.get("row_stride", 1)),
                              float(method.get("tau_min") or PAPER_TAU_MIN))


def calibrate(loaded: Any, reference: Batches, extrapolation: Batches, options: CalibrationOptions) -> Alignment:
    """Algorithm 1 end to end: S̄_tr(1) on length-L_tr batches, then τ_ex on the extrapolation batches."""
    return align_to(loaded, extrapolation, reference_statistic(loaded, reference, options), options)


def reference_statistic(loaded: Any, reference: Batches, options: CalibrationOptions) -> float:
    """S̄_tr(1): FINDS(1, M) on the length-L_tr batches, as :func:`find_s`."""
    value = options.capture(loaded, reference, 1.0).mean(options.mode)
    log.info("Algorithm 1: S̄_tr(1) = %.4f (%s, %d record(s) at L_tr); searching τ at L_ex", value, options.mode,
             len(reference))
    return value


def align_to(loaded: Any, extrapolation: Batches, target: float, options: CalibrationOptions) -> Alignment:
    """τ_ex whose S̄_ex(τ) on the extrapolation batches is closest to ``target`` (:func:`align_temperature`).

    Called on its own, after :func:`reference_statistic`, where the model changes between the two phases
    (paper B's GPT-2 reads its APE table at L_t, and interpolated to L_ex at L_ex)."""
    def statistic(t: float) -> float:  # one statistics pass per τ tried, each logged: the search shows progress
        value = options.capture(loaded, extrapolation, t).mean(options.mode)
        log.info("Algorithm 1: S̄_ex(τ = %.2f) = %.4f (target %.4f)", t, value, target)
        return value

    return align_temperature(statistic, target, options.mode, options.search, temperature_grid(options.tau_min))


def _per_layer(stats: Any, mode: str) -> list[float]:
    per_head = stats.pmax() if mode == "pmax" else stats.entropy()
    return [float(x) for x in per_head.mean(1)]


def calibrate_per_layer(loaded: Any, reference: Batches, extrapolation: Batches,
                        options: CalibrationOptions) -> list[Alignment]:
    """Per-layer Algorithm 1 (paper A, Limitations: proposed as future work): one τ per attention module.

    Layer ℓ's τ is aligned with layers < ℓ already at their chosen τ (a layer's statistic does not depend on
    the layers after it), so the layers are aligned one after another, each by the same grid/bisect search.
    """
    mode = options.mode
    targets = _per_layer(options.capture(loaded, reference, 1.0), mode)
    taus = [1.0] * len(targets)
    out = []
    for layer, target in enumerate(targets):
        def statistic(t: float, layer: int = layer) -> float:
            trial = taus[:layer] + [t] + taus[layer + 1:]
            return _per_layer(options.capture(loaded, extrapolation, trial), mode)[layer]

        result = align_temperature(statistic, target, mode, options.search, temperature_grid(options.tau_min))
        taus[layer] = result.tau
        out.append(result)
    return out
