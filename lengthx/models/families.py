"""One adapter per model family: which attention modules a temperature scope touches, and how to load.

Scopes (docs/design.md §5): ``encoder`` = T5 encoder self-attention (paper A's setting); ``all`` also includes
decoder self- and cross-attention. Decoder-only families have self-attention only, so both scopes select it
(an extension beyond paper A).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from lengthx.models.model_types import FAMILY_PE, MODEL_TYPES

SCOPES = ("encoder", "all")


def _t5_modules(model: torch.nn.Module, scope: str) -> list[torch.nn.Module]:
    modules = [block.layer[0].SelfAttention for block in model.encoder.block]
    if scope == "all":
        for block in model.decoder.block:
            modules += [block.layer[0].SelfAttention, block.layer[1].EncDecAttention]
    return modules


def _gpt2_modules(model: torch.nn.Module, scope: str) -> list[torch.nn.Module]:
    return [block.attn for block in model.transformer.h]


def _neox_modules(model: torch.nn.Module, scope: str) -> list[torch.nn.Module]:
    return [layer.attention for layer in model.gpt_neox.layers]


def _llama_modules(model: torch.nn.Module, scope: str) -> list[torch.nn.Module]:
    return [layer.self_attn for layer in model.model.layers]


def _bloom_modules(model: torch.nn.Module, scope: str) -> list[torch.nn.Module]:
    """BLOOM self-attention, made temperature-capable on first use (inline ALiBi, ``lengthx.attention.bloom``).

    BLOOM is eager-only and does not dispatch through ``AttentionInterface``; its ``BloomAttention``
    instances are switched to a subclass that divides ALiBi and QKᵀ·inv_norm_factor by τ (docs/design.md §5).
    """
    from lengthx.attention.bloom import enable_temperature

    return enable_temperature(model)


@dataclass(frozen=True)
class Family:
    """A model family: its position encoding, architecture kind and attention modules."""

    name: str
    pe: str
    encoder_decoder: bool
    attention_modules: Callable[[torch.nn.Module, str], list[torch.nn.Module]] | None
    # attention implementation to load with; "lengthx" = our AttentionInterface entry (temperature-capable)
    attn_implementation: str = "lengthx"

    def temperature_modules(self, model: torch.nn.Module, scope: str = "encoder") -> list[torch.nn.Module]:
        """The attention modules that receive τ under ``scope``."""
        if scope not in SCOPES:
            raise ValueError(f"unknown method.scope={scope!r}; valid scopes: {', '.join(SCOPES)}")
        if self.attention_modules is None:
            raise ValueError(
                f"temperature methods are not available for the {self.name} family yet; "
                "use method=none, or a model of family t5/gpt2/gpt_neox/llama"
            )
        return self.attention_modules(model, scope)

    @property
    def supports_temperature(self) -> bool:
        return self.attention_modules is not None


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("t5", FAMILY_PE["t5"], True, _t5_modules),
        Family("gpt2", FAMILY_PE["gpt2"], False, _gpt2_modules),
        Family("gpt_neox", FAMILY_PE["gpt_neox"], False, _neox_modules),
        Family("llama", FAMILY_PE["llama"], False, _llama_modules),
        # BLOOM computes ALiBi inline in an eager-only attention: τ enters through its baddbmm factors.
        Family("bloom", FAMILY_PE["bloom"], False, _bloom_modules, attn_implementation="eager"),
    ]
}


def get_family(name: str) -> Family:
    """The adapter of family ``name``, or a clear error listing the known families."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}; known families: {', '.join(FAMILIES)}") from None


def base_model(model: nn.Module) -> nn.Module:
    """The transformer body under a *ForCausalLM head (GPT-2/BLOOM: ``.transformer``; NeoX: ``.gpt_neox``)."""
    for attr in ("transformer", "gpt_neox"):
        if hasattr(model, attr):
            return getattr(model, attr)
    return model


def family_of(model: nn.Module) -> Family:
    """The adapter of a transformers model, from its ``config.model_type``; a model of another type is a
    ValueError naming the supported ones."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"{type(model).__name__} (model_type {model_type!r}) is not supported: lengthx applies τ and measures "
            f"attention on model types {', '.join(MODEL_TYPES)} (T5 encoders for paper A; GPT-2, GPT-NeoX, "
            "LLaMA-style and BLOOM decoders)")
    return FAMILIES[MODEL_TYPES[model_type]]
