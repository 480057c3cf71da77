"""Original positions per model family for segmented training (paper B §3, docs/design.md §5).

One question per function: how does a family take the original position ids of a segmented sequence, and
how does it grow to L_e?

- **GPT-2 (APE)** takes ``position_ids``; its learned table ``wpe`` has only L_t rows, so it is grown to L_e
  by linear interpolation (paper B §3.2, :func:`lengthx.segmented.positions.interpolate_ape`) and ``n_positions`` is
  updated (:func:`extend_ape`).
- **GPT-NeoX (RoPE)** takes ``position_ids``; rotary angles are computed from them on the fly, so only the
  advertised maximum (``max_position_embeddings``) is raised (:func:`extend_rope`).
- **BLOOM (ALiBi)** has no ``position_ids`` argument: transformers builds ALiBi from the cumulative sum of
  the attention mask, i.e. from *contiguous* positions, so chunk/prefix BLOOM would silently train on
  contiguous positions. :func:`enable_explicit_alibi` makes a ``position_ids`` argument drive the ALiBi
  tensor (slope_h · p_j per key, :func:`lengthx.segmented.positions.alibi_key_bias`).

Every segmented forward also needs an explicit attention mask: transformers 5 reads ``position_ids`` with
gaps and no mask as packed sequences and blocks attention across the gaps (:func:`segmented_forward`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lengthx.models.families import base_model
from lengthx.segmented.positions import alibi_key_bias, alibi_slopes, interpolate_ape

SEGMENTED_FAMILIES = ("gpt2", "gpt_neox", "bloom")


_EXPLICIT_ATTR = "_lengthx_explicit_alibi"


_POSITIONS_ATTR = "_lengthx_position_ids"


_PENDING_ATTR = "_lengthx_pending_position_ids"


def check_family(family: str) -> None:
    """Fail fast for families segmented training does not cover (encoder-decoders, unknown names)."""
    if family not in SEGMENTED_FAMILIES:
        raise ValueError(
            f"segmented training and segmented_ppl need a decoder-only model of family "
            f"{', '.join(SEGMENTED_FAMILIES)}; got family {family!r}"
            + (" (an encoder-decoder)" if family == "t5" else "")
        )


def max_positions(model: nn.Module, family: str) -> int | None:
    """The longest sequence the model's position encoding accepts (None: unbounded, ALiBi)."""
    if family == "gpt2":
        return int(base_model(model).wpe.num_embeddings)
    if family == "gpt_neox":
        return int(model.config.max_position_embeddings)
    return None


# ---- GPT-2: APE interpolation ---------------------------------------------------------------------------
def extend_ape(model: nn.Module, new_length: int) -> bool:
    """Grow a GPT-2 ``wpe`` to ``new_length`` rows with :func:`interpolate_ape`; update ``n_positions``.

    Returns whether the table changed (False when it already has ``new_length`` rows or more). The new
    table is a fresh trainable ``nn.Embedding`` on the old one's device and dtype; ``save_pretrained``
    then writes the grown table and the new ``n_positions``, so the checkpoint reloads at L_e.
    """
    body = base_model(model)
    old: nn.Embedding = body.wpe
    if new_length <= old.num_embeddings:
        return False
    new = nn.Embedding(new_length, old.embedding_dim, device=old.weight.device, dtype=old.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(interpolate_ape(old.weight, new_length))
    new.weight.requires_grad_(old.weight.requires_grad)
    body.wpe = new
    model.config.n_positions = new_length
    return True


# ---- GPT-NeoX: RoPE maximum ------------------------------------------------------------------------------
def extend_rope(model: nn.Module, new_length: int) -> bool:
    """Raise a GPT-NeoX's ``max_position_embeddings`` (and its rotary cache length) to ``new_length``.

    Default RoPE computes cos/sin from the position ids at every call, so nothing else changes; the
    original maximum is left alone (dynamic RoPE variants scale relative to it).
    """
    if new_length <= model.config.max_position_embeddings:
        return False
    model.config.max_position_embeddings = new_length
    rotary = getattr(base_model(model), "rotary_emb", None)
    if rotary is not None and hasattr(rotary, "max_seq_len_cached"):
        rotary.max_seq_len_cached = max(int(rotary.max_seq_len_cached), new_length)
    return True


# ---- BLOOM: ALiBi from explicit positions ---------------------------------------------------------------
def _explicit_build_alibi(body: nn.Module, original):
    def build_alibi_tensor(attention_mask: torch.Tensor, num_heads: int, dtype: torch.dtype) -> torch.Tensor:
        positions = getattr(body, _POSITIONS_ATTR, None)
        if positions is None:
            return original(attention_mask, num_heads, dtype)
        batch, kv_len = attention_mask.shape
        if positions.shape[-1] != kv_len:
            raise ValueError(
                f"BLOOM with explicit positions: position_ids cover {positions.shape[-1]} tokens but "
                f"keys are {kv_len} (explicit positions are not supported with a KV cache)"
            )
        positions = positions.to(attention_mask.device).expand(batch, kv_len)
        bias = alibi_key_bias(alibi_slopes(num_heads, attention_mask.device), positions)  # (B, H, 1, K)
        return bias.reshape(batch * num_heads, 1, kv_len).to(dtype)

    return build_alibi_tensor


def _outer_pre_hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]):
    # BloomForCausalLM.forward has no position_ids parameter and does not pass it on: hand it to the body
    setattr(base_model(module), _PENDING_ATTR, kwargs.pop("position_ids", None))
    return args, kwargs


def _body_pre_hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]):
    positions = kwargs.pop("position_ids", None)
    if positions is None:
        positions = getattr(module, _PENDING_ATTR, None)
    setattr(module, _PENDING_ATTR, None)
    setattr(module, _POSITIONS_ATTR, positions)
    if (
        positions is not None
        and kwargs.get("attention_mask") is None
        and not (len(args) > 2 and args[2] is not None)
    ):
        ids = kwargs.get("input_ids", args[0] if args else None)
        ref = ids if ids is not None else kwargs["inputs_embeds"][..., 0]
        # a mask makes BloomModel call build_alibi_tensor (our positions) instead of its arange shortcut
        kwargs["attention_mask"] = torch.ones(ref.shape[:2], dtype=torch.long, device=ref.device)
    return args, kwargs


def enable_explicit_alibi(model: nn.Module) -> nn.Module:
    """Make ``model(input_ids, position_ids=…)`` build BLOOM's ALiBi from those positions (in place).

    Stock transformers BLOOM derives key positions from ``attention_mask.cumsum(-1) − 1``; with this switched
    on, a ``position_ids`` argument (to ``BloomForCausalLM`` or ``BloomModel``) replaces them: the bias of
    key j in head h is slope_h · p_j (equivalent under softmax to −slope_h · (p_i − p_j)). Without
    ``position_ids`` the model behaves exactly as stock. The switch is two forward pre-hooks and an
    instance-level ``build_alibi_tensor``; weights, ``state_dict`` and ``save_pretrained`` are untouched.
    Idempotent. Explicit positions are for full-sequence forwards (training, perplexity), not KV-cached
    generation.
    """
    body = base_model(model)
    if getattr(body, _EXPLICIT_ATTR, False):
        return model
    if not hasattr(body, "build_alibi_tensor"):
        raise TypeError(f"{type(model).__name__} is not a BLOOM model (no build_alibi_tensor)")
    body.build_alibi_tensor = _explicit_build_alibi(body, body.build_alibi_tensor)
    body.register_forward_pre_hook(_body_pre_hook, with_kwargs=True)
    if body is not model:
        model.register_forward_pre_hook(_outer_pre_hook, with_kwargs=True)
    setattr(body, _EXPLICIT_ATTR, True)
    return model


# ---- one entry point per use ----------------------------------------------------------------------------
def prepare_for_length(model: nn.Module, family: str, length: int) -> dict[str, Any]:
    """Make ``model`` accept original positions up to ``length`` (L_e); returns what changed.

    GPT-2: ``wpe`` interpolated to ``length`` if it is shorter (out-of-the-box APE extension, §3.2/§5.1).
    GPT-NeoX: RoPE maximum raised. BLOOM: explicit-position ALiBi switched on.
    """
    check_family(family)
    before = max_positions(model, family)
    info: dict[str, Any] = {"family": family, "length": int(length), "positions_before": before}
    if family == "gpt2":
        info["ape_interpolated"] = extend_ape(model, length)
    elif family == "gpt_neox":
        info["rope_extended"] = extend_rope(model, length)
    else:
        enable_explicit_alibi(model)
        info["explicit_alibi"] = True
    info["positions_after"] = max_positions(model, family)
    return info


def segmented_forward(
    model: nn.Module,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> Any:
    """``model(input_ids, position_ids=…, attention_mask=…)`` with an all-ones mask when none is given.

    Without the mask, transformers 5 infers packed sequences from the gaps in ``position_ids`` and blocks
    attention between the segments. ``use_cache`` is off: a segmented forward is a full-sequence forward.
    """
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    kwargs.setdefault("use_cache", False)
    return model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask, **kwargs)
