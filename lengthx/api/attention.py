"""Temperature on a plain transformers model (paper A §4; docs/api.md): which attention modules carry τ, and
τ applied and removed, as a context manager or for good.

softmax(l/τ) with l = QKᵀ·scaling + position bias, the padding and causal masks added after the division
(:mod:`lengthx.attention.temperature`). The model's attention is switched to lengthx's implementation while τ
(or a statistic, :mod:`lengthx.api.alignment`) is attached, and back to the model's own when it is removed;
at τ = 1 lengthx's implementation is stock SDPA, so outputs are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lengthx.attention.t5_bias import disable_efficient_t5, efficient_t5_settings, enable_efficient_t5
from lengthx.attention.temperature import (
    ATTN_NAME,
    clear_temperature,
    register,
    restore_temperature,
    saved_temperature,
    set_temperature,
)
from lengthx.models.families import Family, family_of

if TYPE_CHECKING:
    from torch import nn

    Tau = float | Sequence[float] | Mapping[int, float]

_ATTACHED = "_lengthx_attached"  # (times attached, the model's own attention implementation, its T5 settings)
_APPLIED = "_lengthx_applied"  # apply_temperature's attachment, released by remove_temperature


def model_family(model: nn.Module) -> str:
    """The lengthx family of a transformers model (``t5``, ``gpt2``, ``gpt_neox``, ``llama``, ``bloom``), from its
    ``config.model_type``; another model type is a ValueError naming the supported ones."""
    return family_of(model).name


def attention_modules(model: nn.Module, scope: str = "encoder") -> list[nn.Module]:
    """The attention modules that carry τ under ``scope``, in order: T5's encoder self-attention, one per layer
    (``encoder``, paper A's setting), or also each decoder layer's self- and cross-attention (``all``); a
    decoder's self-attention, one per layer, under either scope."""
    return family_of(model).temperature_modules(model, scope)


def _attach(model: nn.Module) -> Family:
    """Route ``model``'s attention through lengthx (nested calls count; :func:`_detach` undoes the last)."""
    family = family_of(model)
    count, original, efficient = getattr(model, _ATTACHED, (0, None, None))
    if count == 0:
        original = getattr(model.config, "_attn_implementation", None)
        if family.attn_implementation == ATTN_NAME:
            register()
            if original != ATTN_NAME:
                model.set_attn_implementation(ATTN_NAME)
        if family.name == "t5":  # inputs above 2048 tokens: the memory-lean encoder attention (docs/design.md §9)
            efficient = efficient_t5_settings(model)
            if efficient is None:
                enable_efficient_t5(model)
    setattr(model, _ATTACHED, (count + 1, original, efficient))
    return family


def _detach(model: nn.Module) -> None:
    """Undo one :func:`_attach`; the last one clears τ and gives the model its own attention back."""
    count, original, efficient = getattr(model, _ATTACHED, (0, None, None))
    if count > 1:
        setattr(model, _ATTACHED, (count - 1, original, efficient))
        return
    if count == 0:
        return
    delattr(model, _ATTACHED)
    family = family_of(model)
    clear_temperature(family.temperature_modules(model, "all"))
    if family.name == "t5" and efficient is None:
        disable_efficient_t5(model)
    if family.name == "bloom":
        from lengthx.attention.bloom import disable_temperature

        disable_temperature(model)
    if original is not None and getattr(model.config, "_attn_implementation", None) != original:
        model.set_attn_implementation(original)


@contextmanager
def attached(model: nn.Module) -> Iterator[Family]:
    """``model`` routed through lengthx's attention for the block (statistics, τ), restored afterwards."""
    family = _attach(model)
    try:
        yield family
    finally:
        _detach(model)


def _set(model: nn.Module, tau: Tau, scope: str) -> list[nn.Module]:
    modules = attention_modules(model, scope)
    if isinstance(tau, Mapping):
        unknown = sorted(set(tau) - set(range(len(modules))))
        if unknown:
            raise ValueError(f"τ given for attention modules {unknown}, but scope={scope!r} has {len(modules)} "
                             f"(indices 0-{len(modules) - 1})")
        tau = [tau.get(i, 1.0) for i in range(len(modules))]
    set_temperature(modules, tau)
    return modules


@contextmanager
def temperature(model: nn.Module, tau: Tau, scope: str = "encoder") -> Iterator[list[nn.Module]]:
    """Apply τ for the duration of a ``with`` block (paper A §4), then remove it::

        with lengthx.temperature(model, 0.8):
            model.generate(...)

    ``tau``: one value for every module of ``scope``, one per module (:func:`attention_modules`: per layer for
    a T5 encoder or a decoder), or ``{module index: τ}`` with 1 elsewhere. ``scope``: ``encoder`` (T5's encoder
    self-attention, the paper's setting) or ``all``. Yields the modules that carry τ. When the block ends, every
    module has the τ it had before it: a block nested in another gives the outer τ back, and one after
    :func:`apply_temperature` the applied τ. ``tau`` must be a finite number above 0 (ValueError otherwise)."""
    with attached(model) as family:
        everything = family.temperature_modules(model, "all")
        before = saved_temperature(everything)  # a block nested in another, or after apply_temperature
        modules = _set(model, tau, scope)
        try:
            yield modules
        finally:
            restore_temperature(everything, before)


def apply_temperature(model: nn.Module, tau: Tau, scope: str = "encoder") -> list[nn.Module]:
    """Apply τ until :func:`remove_temperature` (as :func:`temperature`, without the ``with`` block); applying
    again replaces the previous τ. Returns the modules that carry it."""
    if not getattr(model, _APPLIED, False):
        _attach(model)
        setattr(model, _APPLIED, True)
    family = family_of(model)
    clear_temperature(family.temperature_modules(model, "all"))
    return _set(model, tau, scope)


def remove_temperature(model: nn.Module) -> None:
    """Remove what :func:`apply_temperature` applied: τ = 1 and the model's own attention implementation."""
    if getattr(model, _APPLIED, False):
        delattr(model, _APPLIED)
        _detach(model)
