"""Paper A on a plain transformers model and tokenizer (docs/api.md): dispersal statistics (§3.3), Algorithm 1
(§4) and Propositions 1-2 (§7).

Each function wraps the model for the call (:func:`lengthx.api.attention.attached`) and runs the same code as
``lengthx stats`` and ``lengthx calibrate`` (:mod:`lengthx.alignment`): inputs are encoded one example per batch
with :func:`lengthx.models.generation.encode`, as the command encodes its examples, so the same model and
inputs give the same τ.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from lengthx.alignment.algorithm1 import TEMPERATURE_GRID, Alignment, CalibrationOptions
from lengthx.alignment.algorithm1 import calibrate as algorithm1
from lengthx.alignment.algorithm1 import calibrate_per_layer as algorithm1_per_layer
from lengthx.alignment.propositions import (
    closed_form_temperature,
    log_temperature,
    prop1_temperature,
    prop2_temperature,
)
from lengthx.alignment.statistics import capture_stats
from lengthx.api.attention import attached
from lengthx.models.generation import encode
from lengthx.models.limits import position_limit, too_long
from lengthx.models.loading import LoadedModel

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["TEMPERATURE_GRID", "Alignment", "ClosedForm", "Dispersal", "calibrate", "calibrate_per_layer",
           "dispersal", "log_temperature", "prop1_temperature", "prop2_temperature", "proposition_temperature"]

# one input: a text, or its token ids (a list of ints or a 1-D tensor); several: a list of those
Input = str | Sequence[int] | torch.Tensor
Inputs = Input | Sequence[Input]


@dataclass(frozen=True)
class Dispersal:
    """Dispersal statistics of the inputs at temperature ``tau`` (paper A §3.3, Table 1).

    ``pmax`` and ``entropy`` are (attention modules, heads): the mean over each head's query rows of the
    largest attention probability and of the entropy (nats) of its attention row. ``tokens`` is the input's
    length (the mean length of several)."""

    pmax: torch.Tensor
    entropy: torch.Tensor
    tokens: float
    tau: float

    @property
    def mean_pmax(self) -> float:
        """S̄ of Algorithm 1 for P_max: the mean over modules, heads and query rows."""
        return float(self.pmax.mean())

    @property
    def mean_entropy(self) -> float:
        """S̄ of Algorithm 1 for entropy."""
        return float(self.entropy.mean())


@dataclass(frozen=True)
class ClosedForm:
    """τ of Proposition 1 or 2 and the layer-0 statistics it was computed from (``pmax``, ``sigma``, ``l_max``)
    at the training length (``train``) and at the extrapolation length (``extrapolation``)."""

    tau: float
    train: dict[str, float]
    extrapolation: dict[str, float]


def _as_list(inputs: Inputs) -> list[Input]:
    if isinstance(inputs, str) or (isinstance(inputs, torch.Tensor) and inputs.dim() == 1):
        return [inputs]
    if isinstance(inputs, torch.Tensor):
        return list(inputs)
    if hasattr(inputs, "prompt"):
        inputs = [inputs]  # one Example: named below
    items = list(inputs)
    return [items] if items and isinstance(items[0], int) else items  # one list of token ids


def _check_input(index: int, item: Any) -> None:
    """ValueError naming input ``index`` when it is neither a text nor token ids (a task's ``Example``: pass its
    ``.prompt``), or holds no token."""
    if hasattr(item, "prompt") and hasattr(item, "target"):
        raise ValueError(f"input {index} is a lengthx Example, not a text: pass its prompt, e.g. "
                         "[e.prompt for e in lengthx.task_examples(...)]")
    if isinstance(item, str):
        if not item:
            raise ValueError(f"input {index} is an empty text: pass at least one token")
        return
    if isinstance(item, torch.Tensor):
        if item.dim() != 1 or item.numel() == 0 or item.is_floating_point():
            raise ValueError(f"input {index} is a tensor of shape {tuple(item.shape)} and dtype {item.dtype}: pass "
                             "one 1-D tensor of token ids (at least one) per input")
        return
    if not isinstance(item, Sequence) or not item or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in item):
        shown = repr(item)[:60]
        raise ValueError(f"input {index} is {shown}: pass a text, or a non-empty list of token ids (ints), per input")


def check_row_stride(row_stride: Any) -> int:
    """``row_stride`` as an int of at least 1, or a ValueError naming it."""
    if isinstance(row_stride, bool) or not isinstance(row_stride, int) or row_stride < 1:
        raise ValueError(f"row_stride must be a whole number of at least 1 (every n-th query row), got "
                         f"row_stride={row_stride!r}")
    return row_stride


@contextmanager
def _tokenizer_kept(tokenizer: PreTrainedTokenizerBase) -> Iterator[None]:
    """``encode`` sets the padding side and pad token lengthx batches with; the caller's tokenizer keeps its own."""
    side, pad = tokenizer.padding_side, tokenizer.pad_token
    try:
        yield
    finally:
        tokenizer.padding_side = side
        if pad is None:  # a tokenizer without a pad token gets none back
            tokenizer.pad_token = None
        elif tokenizer.pad_token != pad:
            tokenizer.pad_token = pad


def _batches(loaded: LoadedModel, inputs: Inputs) -> tuple[list[dict[str, torch.Tensor]], float]:
    """One batch of model inputs per example (texts through :func:`~lengthx.models.generation.encode`), and the
    examples' mean length in tokens."""
    batches = []
    items = _as_list(inputs)
    for index, item in enumerate(items):
        _check_input(index, item)
    limit = position_limit(loaded.model.config)
    with _tokenizer_kept(loaded.tokenizer):
        for item in items:
            if isinstance(item, str):
                batches.append(encode(loaded, [item]))
            else:
                ids = torch.as_tensor(item, dtype=torch.long).reshape(1, -1).to(loaded.device)
                batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    if not batches:
        raise ValueError("no input given: pass a text, token ids, or a list of them")
    for index, batch in enumerate(batches):
        tokens = int(batch["input_ids"].shape[-1])
        if limit is not None and tokens > limit:
            raise ValueError(too_long(limit, tokens, f"input {index}", "shorten the input, or use a model with "
                                      "relative, rotary or ALiBi positions (T5, GPT-NeoX, LLaMA, BLOOM)"))
    return batches, sum(int(b["attention_mask"].sum()) for b in batches) / len(batches)


def _loaded(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, family: Any, l_tr: int = 0) -> LoadedModel:
    device = next(model.parameters()).device
    if device.type == "meta":
        raise ValueError("the model's weights are on the meta device (created without data, e.g. under "
                         "init_empty_weights or device_map='meta'): load them first, e.g. "
                         "AutoModel...from_pretrained(path) on cpu or cuda")
    name = str(getattr(model.config, "name_or_path", "") or type(model).__name__)
    return LoadedModel(name, model, tokenizer, family, int(l_tr), device)


@contextmanager
def _measured(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, scope: str) -> Iterator[LoadedModel]:
    """``model`` routed through lengthx's attention (:func:`~lengthx.api.attention.attached`) as a
    :class:`LoadedModel`, for statistics of ``scope``."""
    with attached(model) as family:
        if family.encoder_decoder and scope != "encoder":
            raise ValueError("statistics are measured on T5's encoder self-attention (paper A): use "
                             "scope='encoder'; scope='all' applies τ to the decoder too but has no statistics there")
        yield _loaded(model, tokenizer, family)


def _algorithm1(run: Any, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, reference: Inputs,
                long: Inputs, mode: str, search: str, scope: str, row_stride: int) -> Any:
    check_row_stride(row_stride)
    with _measured(model, tokenizer, scope) as loaded:
        return run(loaded, _batches(loaded, reference)[0], _batches(loaded, long)[0],
                   CalibrationOptions(mode, scope, search, row_stride))


def dispersal(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, inputs: Inputs, tau: float = 1.0,
              scope: str = "encoder", row_stride: int = 1) -> Dispersal:
    """P_max and entropy per attention module and head of ``inputs`` (one text or its token ids, or a list of
    them, pooled) at temperature ``tau`` (paper A §3.3, Table 1). ``row_stride``: every n-th query row only (an
    estimate at a fraction of the cost; 1 = every row)."""
    check_row_stride(row_stride)
    with _measured(model, tokenizer, scope) as loaded:
        batches, tokens = _batches(loaded, inputs)
        stats = capture_stats(loaded, batches, tau, scope, row_stride=row_stride)
        return Dispersal(stats.pmax().float(), stats.entropy().float(), tokens, float(tau))


def calibrate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, reference: Inputs, long: Inputs,
              mode: str = "pmax", search: str = "grid", scope: str = "encoder", row_stride: int = 1) -> Alignment:
    """Algorithm 1 (paper A §4): τ for inputs as long as ``long`` whose mean P_max (``mode="pmax"``) or entropy
    (``"entropy"``) matches that of ``reference`` inputs of the training length at τ = 1.

    ``search="grid"`` tries every τ of :data:`TEMPERATURE_GRID` (the paper), ``"bisect"`` bisects on it (same
    objective, fewer forward passes). Returns an :class:`~lengthx.alignment.algorithm1.Alignment`: ``tau``,
    ``target`` (S̄_tr(1)) and ``evaluated`` (τ → S̄_ex(τ), the curve it was chosen from). ``lengthx calibrate``
    runs the same code on a task's examples."""
    return _algorithm1(algorithm1, model, tokenizer, reference, long, mode, search, scope, row_stride)


def calibrate_per_layer(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, reference: Inputs,
                        long: Inputs, mode: str = "pmax", search: str = "grid", scope: str = "encoder",
                        row_stride: int = 1) -> list[Alignment]:
    """Algorithm 1 once per attention module, each layer aligned with the layers before it at their chosen τ
    (paper A, Limitations; ``lengthx run method.per_layer=true``): one :class:`Alignment` per module, whose
    ``tau`` values :func:`lengthx.temperature` takes as a list."""
    return _algorithm1(algorithm1_per_layer, model, tokenizer, reference, long, mode, search, scope, row_stride)


def proposition_temperature(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, reference: Inputs,
                            long: Inputs, proposition: str = "prop1", l_tr: int | None = None,
                            scope: str = "encoder") -> ClosedForm:
    """τ of Proposition 1 (``prop1``, P_max alignment) or 2 (``prop2``, entropy alignment) of paper A §7, from
    layer 0's average logit vector on ``reference`` (training length ``l_tr``, default their mean length) and
    ``long`` inputs (L_ex: their mean length). A ValueError where the Gaussian approximation has no solution."""
    with _measured(model, tokenizer, scope) as loaded:
        ref, ref_tokens = _batches(loaded, reference)
        ext, l_ex = _batches(loaded, long)
        loaded.l_tr = int(l_tr if l_tr is not None else round(ref_tokens))
        tau, info = closed_form_temperature(loaded, ref, ext, proposition, l_ex, scope)
        return ClosedForm(float(tau), info["train"], info["extrapolation"])
