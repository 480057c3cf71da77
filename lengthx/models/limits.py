"""The longest input a model can read at all (docs/design.md §4): GPT-2's learned absolute position embeddings
have ``n_positions`` rows, and a longer input indexes past them (an ``IndexError`` deep in the embedding). Models
with relative (T5), rotary (GPT-NeoX, LLaMA) or ALiBi (BLOOM) positions have no such wall: past their training
length they extrapolate, which is what the papers measure."""

from __future__ import annotations

from typing import Any


def position_limit(config: Any) -> int | None:
    """The most positions a transformers config's model reads: ``n_positions`` for GPT-2, else None."""
    if getattr(config, "model_type", None) == "gpt2":
        return int(config.n_positions)
    return None


def configured_position_limit(model_cfg: Any) -> int | None:
    """:func:`position_limit` of a ``conf/model`` entry, read from its ``config.json`` (``model.path``, or the
    hub cache) without loading weights; None when there is no limit or the config cannot be read here."""
    from transformers import AutoConfig

    from lengthx.models.loading import ModelNotAvailable, from_source

    try:
        config = from_source(model_cfg.name, model_cfg.get("hub_id"), model_cfg.get("path"), AutoConfig,
                             trust_remote_code=bool(model_cfg.get("trust_remote_code", False)))
    except (ModelNotAvailable, OSError, ValueError):
        return None
    return position_limit(config)


def too_long(limit: int, tokens: int, what: str, fix: str) -> str:
    """The message for ``tokens`` that do not fit a model reading at most ``limit`` positions."""
    return (f"{what} is {tokens} tokens, but the model reads at most {limit} positions (GPT-2's learned absolute "
            f"position embeddings, config n_positions). Fix: {fix}")
