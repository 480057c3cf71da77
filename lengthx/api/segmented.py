"""Paper B on a plain transformers model (docs/api.md): segmented sequences that keep their original positions
(§3.1: :func:`chunk_sample`, :func:`prefix_sample`, :class:`SegmentedCollator`) and linear interpolation of a
learned absolute position table to a longer context (§3.2: :func:`interpolate_ape`). ``lengthx train`` builds its
batches and grows GPT-2 with the same functions (:mod:`lengthx.segmented`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lengthx.models.families import base_model, family_of
from lengthx.segmented.models import extend_ape
from lengthx.segmented.sampling import SegmentedCollator, chunk_sample, collate_segmented, prefix_sample

if TYPE_CHECKING:
    from torch import nn

__all__ = ["SegmentedCollator", "chunk_sample", "collate_segmented", "interpolate_ape", "prefix_sample"]


def interpolate_ape(model: nn.Module, factor: float) -> nn.Module:
    """Grow a GPT-2-family model's learned position table from L_t to L_e = ``factor``·L_t rows by linear
    interpolation (paper B §3.2: e'_{βi} = e_i, the rows between on the segment joining them), in place; also
    sets ``config.n_positions``. Returns the model. RoPE (GPT-NeoX, LLaMA) and ALiBi (BLOOM) models have no
    table to grow: a ValueError says so."""
    family = family_of(model)
    if family.pe != "APE":
        raise ValueError(f"interpolate_ape grows a learned absolute position table (GPT-2); a {family.name} model "
                         f"uses {family.pe}, which needs no interpolation (paper B §3.2)")
    if factor < 1:
        raise ValueError(f"factor = L_e / L_t must be at least 1, got {factor}")
    l_t = base_model(model).wpe.num_embeddings
    extend_ape(model, round(factor * l_t))
    return model
