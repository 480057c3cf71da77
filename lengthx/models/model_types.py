"""Which checkpoints lengthx runs, read from their ``config.json`` alone (no torch, no transformers): the
``model_type`` each family adapter serves (:mod:`lengthx.models.families`) and the training length a config
states where lengthx trusts it (docs/design.md §4, "Your own model").
"""

from __future__ import annotations

from typing import Any

# transformers' ``config.model_type`` → the family adapter that serves it: T5-family encoders for paper A, and the
# decoders whose attention carries τ (an extension beyond paper A)
MODEL_TYPES: dict[str, str] = {"t5": "t5", "gpt2": "gpt2", "gpt_neox": "gpt_neox", "llama": "llama",
                               "mistral": "llama", "qwen2": "llama", "bloom": "bloom"}

# each family's position encoding, as the model configs and paper A Table 2 name it
FAMILY_PE: dict[str, str] = {"t5": "learned relative buckets", "gpt2": "APE", "gpt_neox": "RoPE", "llama": "RoPE",
                             "bloom": "ALiBi"}

# the config.json key that states a model type's training length, where lengthx takes it as L_tr: GPT-2's
# ``n_positions`` is the size of its learned position table (no position past it exists, and GPT-2 was trained
# on all of it), and GPT-NeoX's ``max_position_embeddings`` is the context Pythia was pre-trained on (2048; the
# shipped mini-pythia's 128). No other key is trusted: LLaMA-style configs often state more than the model was
# trained on (Mistral-7B's 32768, position-interpolated LongChat's 16384), T5's relative buckets and BLOOM's
# ALiBi put no length in the config (T5's ``n_positions`` is a generation default).
TRUSTED_LENGTH_KEYS: dict[str, str] = {"gpt2": "n_positions", "gpt_neox": "max_position_embeddings"}


def family_model_types(family: str) -> tuple[str, ...]:
    """The ``model_type`` values family ``family`` loads (``llama``: llama, mistral, qwen2)."""
    return tuple(t for t, f in MODEL_TYPES.items() if f == family) or (family,)


def trusted_training_length(config: dict[str, Any]) -> int | None:
    """The training length a checkpoint's ``config.json`` states, for the model types of
    :data:`TRUSTED_LENGTH_KEYS`; None for any other (``model.l_tr`` must then be given)."""
    key = TRUSTED_LENGTH_KEYS.get(str(config.get("model_type")))
    value = config.get(key) if key else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def trusted_keys_text() -> str:
    """The trusted keys as one phrase for messages: ``gpt2's n_positions, gpt_neox's max_position_embeddings``."""
    return ", ".join(f"{t}'s {k}" for t, k in TRUSTED_LENGTH_KEYS.items())
