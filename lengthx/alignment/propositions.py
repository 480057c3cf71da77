"""Closed-form temperatures of paper A: log scaling τ = log L_tr / log L_ex (§5, Tables 8-11) and
Propositions 1-2 (§7, A.2-A.3), which give τ from layer 0's logit statistics at L_tr and L_ex; and
:func:`rule_temperature`, τ of every method that needs the lengths alone, the scaling rules of YaRN, LongRoPE,
Qwen's logn and SSMax (:mod:`lengthx.attention.scaling`) among them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from lengthx.alignment.statistics import layer0_statistics
from lengthx.attention.scaling import ROW_RULES, RowScale, longrope_temperature, yarn_temperature

# methods whose τ follows from L_ex and L_tr alone (no calibration): one number, or one per query row
RULE_METHODS = ("none", "fixed", "log", "yarn", "longrope", *ROW_RULES)


def log_temperature(l_ex: float, l_tr: float) -> float:
    """τ = log L_tr / log L_ex = log_{L_ex} L_tr (Yao et al. 2021; Su 2021); 1 when L_ex ≤ L_tr."""
    if l_ex <= 0 or l_tr <= 1:
        raise ValueError(f"lengths must be positive with L_tr > 1, got L_ex={l_ex}, L_tr={l_tr}")
    return 1.0 if l_ex <= l_tr else math.log(l_tr) / math.log(l_ex)


def rule_temperature(method: Any, l_ex: float, l_tr: int) -> float | RowScale:
    """τ of a :data:`RULE_METHODS` method (``method``: its config) at L_ex with training length L_tr: ``none`` 1,
    ``fixed`` its ``tau``, ``log`` (paper A §5), ``yarn`` 1/mscale², ``longrope`` 1/factor², and for ``logn`` and
    ``ssmax`` a :class:`~lengthx.attention.scaling.RowScale` (τ per query row, from the keys it sees)."""
    name = str(method.name)
    closed = {"log": log_temperature, "yarn": yarn_temperature, "longrope": longrope_temperature}
    if name == "none":
        return 1.0
    if name == "fixed":
        return float(method.tau)
    if name in closed:
        return closed[name](l_ex, l_tr)
    if name in ROW_RULES:
        return RowScale(name, int(l_tr))
    raise ValueError(f"method {name!r} has no closed-form τ; rules: {', '.join(RULE_METHODS)}")


def check_inputs(**values: float) -> None:
    """ValueError naming the first argument of a closed form that is out of its domain: lengths above 0,
    standard deviations ``sigma_*`` of at least 0, and ``pmax_tr`` a probability in (0, 1]; all finite."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        if name.startswith("sigma"):
            ok, what = value >= 0, "a standard deviation, at least 0"
        elif name == "pmax_tr":
            ok, what = 0 < value <= 1, "a probability in (0, 1]"
        else:
            ok, what = value > 0, "a length above 0"
        if not ok:
            raise ValueError(f"{name}={value!r} is out of range: it is {what}")


def prop1_temperature(l_tr: float, l_ex: float, pmax_tr: float, sigma_tr: float, sigma_ex: float) -> float:
    """Proposition 1 (P_max alignment): the larger root of Aτ² − Bτ + C = 0, i.e. the fixed point of
    τ = B / (A + C/τ²), with A = log L_ex + log P_tr, B = log L_tr + log P_tr + σ_tr²/2, C = σ_ex²/2.

    Returns NaN when the quadratic has no real root (the Gaussian approximation breaks down there); an input
    out of its domain (:func:`check_inputs`) is a ValueError.
    """
    check_inputs(l_tr=l_tr, l_ex=l_ex, pmax_tr=pmax_tr, sigma_tr=sigma_tr, sigma_ex=sigma_ex)
    a = math.log(l_ex) + math.log(pmax_tr)
    b = math.log(l_tr) + math.log(pmax_tr) + sigma_tr**2 / 2
    c = sigma_ex**2 / 2
    disc = b * b - 4 * a * c
    if a == 0 or disc < 0:
        return math.nan
    return (b + math.sqrt(disc)) / (2 * a)


def prop2_temperature(l_tr: float, l_ex: float, sigma_tr: float, sigma_ex: float) -> float:
    """Proposition 2 (entropy alignment): τ = σ_ex / sqrt(σ_tr² + 2 log(L_ex / L_tr)); NaN where the root's
    argument is not positive, a ValueError for an input out of its domain (:func:`check_inputs`)."""
    check_inputs(l_tr=l_tr, l_ex=l_ex, sigma_tr=sigma_tr, sigma_ex=sigma_ex)
    denom = sigma_tr**2 + 2 * math.log(l_ex / l_tr)
    if denom <= 0:
        return math.nan
    return sigma_ex / math.sqrt(denom)


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
