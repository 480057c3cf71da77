"""Evaluating a paper-B model at lengths past its table: :class:`LengthState` keeps a GPT-2's own position
table and interpolates it to each evaluation length (§3.2, the out-of-the-box extension of §5.1) and
extends RoPE's cache; :func:`attention_histogram` is Figure 3's median attention weight past L_t (§6).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from lengthx.tasks.base import Setting
from lengthx.tasks.segmented_ppl import SegmentedPPLTask

log = logging.getLogger("lengthx")


@torch.no_grad()
def median_attention_past(model: torch.nn.Module, input_ids: torch.Tensor, l_t: int) -> torch.Tensor:
    """Figure 3's statistic: the median attention weight of every query at a position ≥ L_t.

    For each layer, head, batch row and query q ≥ L_t, the median of its causal attention distribution over
    keys 0…q (paper B §6: medians far below the mean 1/(q+1) mean a few keys take most of the weight; after
    segmented training they rise and spread). Returns a flat float tensor, ready for a histogram. The model
    runs once with eager attention (switched temporarily; attention probabilities are not exposed by SDPA).
    """
    before = getattr(model.config, "_attn_implementation", None)
    switch = before not in (None, "eager") and hasattr(model, "set_attn_implementation")
    if switch:
        model.set_attn_implementation("eager")
    try:
        out = model(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            output_attentions=True,
            use_cache=False,
        )
    finally:
        if switch:
            model.set_attn_implementation(before)
    medians = []
    length = input_ids.shape[1]
    for probs in out.attentions:  # (B, H, L, L)
        for q in range(l_t, length):
            medians.append(probs[:, :, q, : q + 1].float().median(dim=-1).values.reshape(-1))
    if not medians:
        raise ValueError(f"no query at a position ≥ L_t={l_t} in a sequence of {length} tokens")
    return torch.cat(medians).cpu()


@dataclass
class LengthState:
    """Keeps a GPT-2's own position table so every evaluation length interpolates from it."""

    family: str
    original_wpe: torch.Tensor | None = None

    @classmethod
    def capture(cls, model: torch.nn.Module, family: str) -> LengthState:
        from lengthx.models.families import base_model

        wpe = base_model(model).wpe.weight.detach().clone() if family == "gpt2" else None
        return cls(family, wpe)

    def set_length(self, model: torch.nn.Module, length: int) -> str:
        """Make ``model`` accept ``length`` tokens; returns a note on what was done ('' if nothing)."""
        from lengthx.models.families import base_model
        from lengthx.segmented.models import extend_rope
        from lengthx.segmented.positions import interpolate_ape

        if self.family == "gpt2" and self.original_wpe is not None:
            body, n0 = base_model(model), self.original_wpe.shape[0]
            table = self.original_wpe if length <= n0 else interpolate_ape(self.original_wpe, length)
            if body.wpe.num_embeddings != table.shape[0]:
                body.wpe = torch.nn.Embedding.from_pretrained(table.clone(), freeze=True)
            else:
                with torch.no_grad():
                    body.wpe.weight.copy_(table)
            model.config.n_positions = table.shape[0]
            return f"APE interpolated {n0}->{length}" if length > n0 else ""
        if self.family == "gpt_neox":
            extend_rope(model, length)
        return ""


MEDIAN_BINS = torch.linspace(-7.0, 0.0, 57)  # log10 edges of Figure 3's histogram


def attention_histogram(
    loaded: Any, task: SegmentedPPLTask, setting: Setting, l_t: int, k: int, lengths: LengthState
) -> dict[str, Any]:
    """Histogram of log10 median attention weights of queries past L_t over ``k`` held-out sequences.

    Paper B Figure 3 (§6): values below 10⁻⁷ fall in the first bin. Also records the median of the medians
    and that of the uniform weight 1/(q+1) over the same queries, for reference.
    """
    lengths.set_length(loaded.model, setting.value)
    meds = torch.cat([
        median_attention_past(loaded.model, ids.unsqueeze(0).to(loaded.device), l_t)
        for _, ids in task.sequences(loaded.tokenizer, setting.value, k)
    ])
    logs = meds.clamp_min(1e-7).log10().clamp(max=0.0)
    counts = torch.histogram(logs, bins=MEDIAN_BINS).hist
    uniform = 1.0 / torch.arange(l_t + 1, setting.value + 1, dtype=torch.float64)
    return {
        "setting": setting.label,
        "length": setting.value,
        "sequences": k,
        "log10_edges": [round(float(e), 4) for e in MEDIAN_BINS],
        "counts": [int(c) for c in counts],
        "median": float(meds.median()),
        "uniform_median": float(uniform.median()),
    }
