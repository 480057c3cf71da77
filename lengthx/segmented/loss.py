"""The causal LM loss of paper B's continued pre-training loop (§4; docs/design.md §5), whole or chunked.

The loss is the mean next-token cross-entropy in fp32 over the kept targets (labels other than
``IGNORE_INDEX``): logits[t] predicts labels[t+1]. Computed whole, it needs the (B, L, V) logits at once, in the
model's precision and again in fp32: for BLOOM's 250,880-token vocabulary at 4 x 2,048 tokens one fp32 copy is
7.65 GiB. Above :data:`LOGITS_CHUNK_ELEMENTS` logit entries a micro-batch's loss is therefore computed in
chunks of positions from the final hidden states (:func:`chunked_causal_lm_loss`): each chunk's logits are
projected, scored and freed, and recomputed in backward (activation checkpointing), so at most one chunk's
logits exist at a time. Same loss and gradients up to float rounding; smaller micro-batches (the shipped
minis) keep the whole computation and so their exact numbers.

The final hidden states come through the model's own forward (``output_hidden_states=True``: the last entry
is the output of the final layer norm for GPT-2, GPT-NeoX and BLOOM, so the output embedding of it gives the
logits), so a DDP-wrapped model is called as usual; ``logits_to_keep=1`` stops the forward from computing the
full logits itself.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from lengthx.segmented.models import segmented_forward
from lengthx.segmented.sampling import IGNORE_INDEX

LOGITS_CHUNK_ELEMENTS = 2**28
"""Logit entries (B·L·V) above which the loss is chunked, and about how many one chunk holds (1 GiB in fp32)."""


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the kept targets (fp32): logits[t] predicts labels[t+1]."""
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        labels[:, 1:].reshape(-1),
        ignore_index=IGNORE_INDEX,
    )


def loss_chunk_positions(batch: int, length: int, vocab: int, limit: int | None = None) -> int | None:
    """Positions per chunk for a (``batch``, ``length``) micro-batch over ``vocab`` logits: None (whole loss)
    when its B·L·V logits are at most ``limit`` entries (default :data:`LOGITS_CHUNK_ELEMENTS`), else as many
    positions as fit in ``limit`` entries (at least one)."""
    limit = LOGITS_CHUNK_ELEMENTS if limit is None else int(limit)
    if batch * length * vocab <= limit:
        return None
    return max(1, limit // (batch * vocab))


def _chunk_loss_sum(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    targets: torch.Tensor) -> torch.Tensor:
    """Summed fp32 cross-entropy of one chunk: its logits are projected from ``hidden`` and dropped after."""
    logits = F.linear(hidden, weight, bias)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction="sum")


def chunked_causal_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk: int,
                           bias: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`causal_lm_loss` of the logits ``hidden @ weight.T + bias``, never holding them whole.

    ``hidden``: the final hidden states (B, L, d); ``weight`` (V, d) and ``bias`` (V,): the output embedding;
    ``chunk``: positions per chunk. Each chunk's summed cross-entropy is checkpointed (its logits are freed and
    recomputed in backward); the sum over chunks is divided by the number of kept targets, so the result is the
    mean of the whole loss (NaN when no target is kept, as there).
    """
    if chunk < 1:
        raise ValueError(f"chunk must be at least one position, got {chunk}")
    states, targets = hidden[:, :-1], labels[:, 1:]
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for h, y in zip(torch.split(states, chunk, dim=1), torch.split(targets, chunk, dim=1), strict=True):
        total = total + checkpoint(_chunk_loss_sum, h, weight, bias, y, use_reentrant=False)
    return total / (targets != IGNORE_INDEX).sum()


def micro_batch_loss(model: nn.Module, output_embeddings: nn.Module, batch: dict[str, torch.Tensor],
                     autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
                     limit: int | None = None) -> torch.Tensor:
    """The loss of one micro-batch (``input_ids``, ``position_ids``, ``attention_mask``, ``labels``) through
    ``model``'s forward (:func:`segmented_forward`; DDP-wrapped or not).

    Whole (:func:`causal_lm_loss` of the forward's logits) unless :func:`loss_chunk_positions` asks for chunks;
    then the forward returns its final hidden states and :func:`chunked_causal_lm_loss` projects them with
    ``output_embeddings`` (the unwrapped model's ``get_output_embeddings()``) under ``autocast`` (the run's
    mixed precision, as the forward's own projection would run).
    """
    ids, labels = batch["input_ids"], batch["labels"]
    chunk = loss_chunk_positions(ids.shape[0], ids.shape[1], output_embeddings.weight.shape[0], limit)
    if chunk is None:
        outputs = segmented_forward(model, ids, batch["position_ids"], batch["attention_mask"])
        return causal_lm_loss(outputs.logits, labels)
    outputs = segmented_forward(model, ids, batch["position_ids"], batch["attention_mask"],
                                output_hidden_states=True, logits_to_keep=1)
    hidden = outputs.hidden_states[-1]
    del outputs  # the other layers' states stay only as far as backward needs them
    with autocast():
        return chunked_causal_lm_loss(hidden, output_embeddings.weight, labels, chunk,
                                      getattr(output_embeddings, "bias", None))
