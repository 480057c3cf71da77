"""Perplexity at L_t, 2L_t, 4L_t (… 5L_t) for paper B's Tables 2-5 and Figure 2 (paper B §4.5, §5.1).

Protocol (paper B §4.1, §4.5; docs/design.md §5): held-out documents are cut into non-overlapping sequences of the
evaluation length L (remainder dropped, one document per sequence, no packing); every sequence is scored
whole, with no sliding window: ppl(x) = exp(−(1/n) Σ_i log p(x_i | x_<i)) over its n = L − 1 predicted
tokens (eq. 3). A cell reports the **mean of the per-sequence perplexities** (``ppl``, the paper's number)
and the **token-weighted perplexity** exp(Σ NLL / Σ n) (``ppl_tokens``).

Settings are multiples of the model's L_t (``task.factors``; labels ``L_t``, ``2L_t``, …). An APE model
(GPT-2) evaluated beyond its table is linearly interpolated to the evaluation length first (§3.2, the
out-of-the-box extension of §5.1), always from the checkpoint's own table. RoPE and ALiBi need nothing.

Method ids in results: a published checkpoint is ``pretrained``; a checkpoint written by ``lengthx train`` carries its
training label (``lengthx_train.json``), suffixed ``@<β>L_t`` when it was trained to L_e = βL_t > L_t
(``chunk-0.25@4L_t``), so Table 3's "chunk-0.25, 4L_t" cell is the 4L_t-trained model at 4L_t.
``task.method_label=`` overrides the id. Paper B's OOTB models are the checkpoints after one epoch of domain
adaptation (§4.3): ``lengthx train method=ootb`` (``ootb``); every other method starts from them.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import TYPE_CHECKING, Any

from lengthx.tasks.base import Setting, Task

if TYPE_CHECKING:
    import torch

log = logging.getLogger("lengthx")


TASK_NAME = "segmented_ppl"


METRICS = ("ppl", "ppl_tokens")


LOGIT_BLOCK = 1024  # rows of logits materialised at once (vocab × block floats)


def factor_label(factor: float) -> str:
    """``1`` → ``L_t``, ``2`` → ``2L_t``, ``2.5`` → ``2.5L_t``."""
    return "L_t" if factor == 1 else f"{factor:g}L_t"


def resolve_settings(task_cfg: Any, l_t: int) -> list[Setting]:
    """Evaluation lengths: ``task.settings`` in tokens if given, else ``task.factors`` × L_t."""
    explicit = task_cfg.get("settings")
    if explicit:
        out = []
        for v in explicit:
            v = int(v)
            label = factor_label(v / l_t) if v % l_t == 0 or (2 * v) % l_t == 0 else str(v)
            out.append(Setting(label, v, "tokens"))
        return out
    factors = task_cfg.get("factors") or [1, 2, 4]
    return [Setting(factor_label(float(f)), int(round(float(f) * l_t)), "tokens") for f in factors]


# ---- scoring --------------------------------------------------------------------------------------------
def sequence_nll(model: torch.nn.Module, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token NLL and number of predictions of each row of ``input_ids`` (B, L), no window.

    The body runs once over the whole sequence (positions 0…L−1, an all-ones mask); logits are formed
    ``LOGIT_BLOCK`` rows at a time in fp32 so a long sequence with a large vocabulary fits in memory.
    """
    import torch  # here, not at import: reading results (lengthx tables) needs the task classes, not torch

    with torch.no_grad():
        return _sequence_nll(model, input_ids)


def _sequence_nll(model: torch.nn.Module, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    from lengthx.models.families import base_model

    body, head = base_model(model), model.get_output_embeddings()
    mask = torch.ones_like(input_ids)
    hidden = body(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state
    nll = torch.zeros(input_ids.shape[0], dtype=torch.float64, device=input_ids.device)
    length = input_ids.shape[1]
    for s in range(0, length - 1, LOGIT_BLOCK):
        e = min(length - 1, s + LOGIT_BLOCK)
        logits = head(hidden[:, s:e]).float()
        ce = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), input_ids[:, s + 1 : e + 1], reduction="none"
        )
        nll += ce.double().sum(-1)
    return nll, torch.full_like(nll, length - 1)


class SegmentedPPLTask(Task):
    """Paper B's perplexity task: test sequences of a length, scored whole."""

    name = TASK_NAME
    metrics = METRICS
    units = ("tokens",)  # what task.unit may name (the unit of explicit task.settings)
    max_new_tokens = 0

    scoring = "perplexity"  # sequences scored whole (no examples, no generation): lengthx.core.perplexity

    def __init__(self, task_cfg: Any, profile: str = "mini", ref_length: int | None = None):
        self.cfg = task_cfg
        self.profile = profile
        self.ref_length = ref_length
        self.l_t: int | None = task_cfg.get("l_t")

    @classmethod
    def from_config(cls, task_cfg: Any, profile: str = "mini") -> SegmentedPPLTask:
        return cls(task_cfg, profile)

    def set_training_length(self, l_tr: int) -> None:
        """L_t (``task.l_t``, else the model's ``l_tr``) and, with ``task.text_factor``, the shared text length."""
        self.l_t = int(self.cfg.get("l_t") or l_tr)
        text_factor = self.cfg.get("text_factor")
        self.ref_length = int(round(float(text_factor) * self.l_t)) if text_factor else None

    def sequences(self, tokenizer: Any, length: int, n: int | None,
                  split: str | None = None) -> list[tuple[str, torch.Tensor]]:
        """The first ``n`` (all when None) held-out ``length``-token sequences, in a fixed order (``split``:
        another split than ``task.split``, e.g. ``train`` for calibration sequences that are never scored).

        With ``ref_length`` (``task.text_factor`` × L_t) every length scores the same text instead: ``n``
        held-out ``ref_length``-token pieces drawn at random (seeded by ``task.seed``), each cut into
        ⌊ref_length / length⌋ consecutive ``length``-token sequences, so perplexities at different lengths
        differ only by context and position, not by which files happen to be long enough.
        """
        import torch

        from lengthx.data.pieces import piece_dataset

        if self.ref_length and self.ref_length > length:
            return [
                (f"{sid}/{j}", ids[j * length : (j + 1) * length])
                for sid, ids in self.sequences(tokenizer, self.ref_length, n, split)
                for j in range(self.ref_length // length)
            ]
        pieces = piece_dataset(
            self.cfg.data, tokenizer, str(split or self.cfg.get("split") or "test"), length, self.profile
        )
        if self.ref_length and n is not None and int(n) < len(pieces):
            pick = torch.randperm(len(pieces), generator=torch.Generator().manual_seed(int(self.cfg.get("seed", 0))))
            rows = pieces.select(sorted(pick[: int(n)].tolist()))
            return [(f"{r['doc_id']}#{int(r['piece'])}", r["input_ids"].long()) for r in rows]
        count = len(pieces) if n is None else min(int(n), len(pieces))
        if count == 0:
            raise ValueError(
                f"no held-out document is at least {length} tokens long; add data (data.files=…, "
                "data.max_docs) or evaluate shorter lengths (task.factors)"
            )
        rows = pieces.select(range(count))
        return [(f"{r['doc_id']}#{int(r['piece'])}", r["input_ids"].long()) for r in rows]


def _token_hash(ids: torch.Tensor) -> str:
    import torch

    return hashlib.sha256(ids.to(torch.int64).cpu().numpy().tobytes()).hexdigest()[:16]




def perplexities(scored: list[tuple[float, int]]) -> tuple[float, float]:
    """(mean of per-sequence perplexities, token-weighted perplexity) of (summed NLL, predicted tokens) pairs."""
    mean_ppl = sum(math.exp(s / c) for s, c in scored) / len(scored)
    return mean_ppl, math.exp(sum(s for s, _ in scored) / sum(c for _, c in scored))
