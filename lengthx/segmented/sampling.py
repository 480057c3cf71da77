"""Segmented sequences that keep their original positions: chunk-α, prefix-α and the collator (paper B §3.1).

From a length-L_e sequence x a length-L_t training sequence is built whose tokens keep their *original*
position ids, so a model trained only on L_t tokens at a time sees the positions (APE) or pairwise distances
(RoPE, ALiBi) of L_e (paper B §3.1, Figure 1; docs/design.md §5):

- **chunk-α**: 1/α non-overlapping contiguous segments of length αL_t, placed uniformly at random in
  [0, L_e) and kept in position order; the loss is on every token (:func:`chunk_sample`).
- **prefix-α**: an index i with (1−α)L_t < i < L_e − αL_t; the suffix x[i : i+αL_t] is contiguous, the
  prefix is (1−α)L_t positions drawn without replacement from [0, i) and sorted; the loss is on the suffix
  only (:func:`prefix_sample`).
- **full**: train on the whole L_e sequence; **da** (domain adaptation, §4.3 and §5.4): train on whole
  length-L_t sequences. Both keep every token and position and put the loss on every token.

All randomness comes from the ``torch.Generator`` passed in, so a sample is a pure function of the
generator's seed: the training loop seeds one generator per global sequence index, which makes the data
stream identical after a resume and independent of the number of processes.

Next-token targets. A batch carries ``labels`` in the transformers convention (the model shifts them:
``labels[t]`` is the target of the prediction made at token t−1; −100 = no loss). A prediction counts when
*both* its input token and its target carry the loss mask. For full, da and chunk (mask everywhere) that is
every prediction, the few that cross a segment boundary included — paper B §3.1 accepts those rare
discontinuities for chunk. For prefix it is the predictions inside the contiguous suffix, so prefix never
trains across a discontinuity, as §3.1 states ("discontinuities occur … never in prefix").
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

METHOD_KINDS = ("full", "chunk", "prefix", "da")


IGNORE_INDEX = -100


def _alpha_tokens(l_t: int, alpha: float) -> int:
    """αL_t as an integer, or a ValueError when it is not one (or α is outside (0, 1))."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    n = alpha * l_t
    if abs(n - round(n)) > 1e-6 or round(n) < 1:
        raise ValueError(f"alpha·L_t must be a positive integer: alpha={alpha}, L_t={l_t} gives {n}")
    return int(round(n))


def chunk_sample(l_e: int, l_t: int, alpha: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Positions of a chunk-α sequence: 1/α non-overlapping contiguous segments of αL_t tokens (paper B §3.1).

    Every placement of the k = 1/α segments in [0, L_e) without overlap is equally likely (adjacent
    segments are allowed). With F = L_e − L_t free positions, a placement is a non-decreasing gap vector
    0 ≤ g_0 ≤ … ≤ g_{k−1} ≤ F (segment j starts at g_j + j·αL_t); those are in bijection with k-subsets
    c_0 < … < c_{k−1} of {0, …, F + k − 1} via g_j = c_j − j, so a uniform k-subset gives a uniform placement.

    Args:
        l_e: length L_e of the source sequence.
        l_t: length L_t of the training sequence; 1/α must be an integer that divides it.
        alpha: segment length as a fraction of L_t (the paper uses 0.125, 0.25, 0.5).
        generator: the source of randomness (a seeded ``torch.Generator`` makes the sample reproducible).

    Returns:
        LongTensor of shape (L_t,): sorted, unique positions in [0, L_e) — the original positions of the kept
        tokens. The loss is on all of them.
    """
    seg = _alpha_tokens(l_t, alpha)
    k = l_t // seg
    if k * seg != l_t or abs(1.0 / alpha - k) > 1e-6:
        raise ValueError(f"chunk-α needs 1/α to be an integer that divides L_t: alpha={alpha}, L_t={l_t}")
    if l_e < l_t:
        raise ValueError(f"chunk-α samples L_t={l_t} tokens from L_e={l_e} < L_t tokens")
    free = l_e - l_t
    picks = torch.randperm(free + k, generator=generator)[:k].sort().values
    starts = picks + torch.arange(k) * (seg - 1)  # g_j + j·seg = (c_j − j) + j·seg
    return (starts[:, None] + torch.arange(seg)[None, :]).reshape(-1)


def prefix_bounds(l_e: int, l_t: int, alpha: float) -> tuple[int, int]:
    """The inclusive range [lo, hi] of the suffix start i of prefix-α: (1−α)L_t < i < L_e − αL_t."""
    n_suffix = _alpha_tokens(l_t, alpha)
    n_prefix = l_t - n_suffix
    lo, hi = n_prefix + 1, l_e - n_suffix - 1
    if lo > hi:
        raise ValueError(
            f"prefix-α has no valid suffix start: (1−α)L_t={n_prefix} < i < L_e−αL_t="
            f"{l_e - n_suffix} is empty (L_e={l_e}, L_t={l_t}); prefix-α needs L_e ≥ L_t + 2"
        )
    return lo, hi


def prefix_sample(
    l_e: int, l_t: int, alpha: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions and loss mask of a prefix-α sequence (paper B §3.1).

    An index i is drawn uniformly with (1−α)L_t < i < L_e − αL_t (the paper's strict bounds, see
    :func:`prefix_bounds`). The suffix is the αL_t contiguous positions i, …, i+αL_t−1; the prefix is
    (1−α)L_t positions drawn without replacement from [0, i) and sorted, so every prefix position lies
    below the suffix start.

    Returns:
        ``(positions, loss_mask)``: a sorted, unique LongTensor of L_t positions in [0, L_e), prefix first,
        and a BoolTensor of L_t that is True exactly on the suffix — the loss is computed over the contiguous
        suffix only.
    """
    n_suffix = _alpha_tokens(l_t, alpha)
    n_prefix = l_t - n_suffix
    lo, hi = prefix_bounds(l_e, l_t, alpha)
    i = int(torch.randint(lo, hi + 1, (1,), generator=generator))
    prefix = torch.randperm(i, generator=generator)[:n_prefix].sort().values
    positions = torch.cat([prefix, torch.arange(i, i + n_suffix)])
    loss_mask = torch.zeros(l_t, dtype=torch.bool)
    loss_mask[n_prefix:] = True
    return positions, loss_mask


@dataclass(frozen=True)
class SegmentMethod:
    """A training method of paper B: ``full``, ``chunk`` or ``prefix`` with its α, or ``da``."""

    kind: str
    alpha: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in METHOD_KINDS:
            raise ValueError(f"unknown segmented method {self.kind!r}; valid: {', '.join(METHOD_KINDS)}")
        if self.kind in ("chunk", "prefix"):
            if self.alpha is None or not 0.0 < float(self.alpha) < 1.0:
                raise ValueError(f"{self.kind}-α needs 0 < alpha < 1, got alpha={self.alpha}")
        elif self.alpha is not None:
            raise ValueError(f"method {self.kind} takes no alpha (got {self.alpha})")

    @classmethod
    def parse(cls, name: str, alpha: float | None = None) -> SegmentMethod:
        """``"chunk-0.25"``, ``"prefix-0.5"``, ``"full"``, ``"da"``; or ``("chunk", alpha=0.25)``."""
        m = re.fullmatch(r"(full|chunk|prefix|da)(?:-([0-9.]+))?", name.strip().lower())
        if m is None:
            raise ValueError(
                f"unknown segmented method {name!r}; valid: full, chunk-α, prefix-α, da (e.g. chunk-0.25)"
            )
        kind, a = m.group(1), m.group(2)
        if a is not None and alpha is not None and not math.isclose(float(a), float(alpha)):
            raise ValueError(f"method {name!r} conflicts with alpha={alpha}")
        value = float(a) if a is not None else (float(alpha) if alpha is not None else None)
        return cls(kind, value if kind in ("chunk", "prefix") else None)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.alpha:g}" if self.alpha is not None else self.kind

    @property
    def segmented(self) -> bool:
        """Whether training sequences are sampled from longer ones (chunk, prefix)."""
        return self.kind in ("chunk", "prefix")

    def source_length(self, l_t: int, l_e: int) -> int:
        """Length of the corpus pieces this method reads: L_t for da, L_e otherwise."""
        return l_t if self.kind == "da" else l_e

    def train_length(self, l_t: int, l_e: int) -> int:
        """Length of the sequences the model is trained on: L_e for full, L_t otherwise."""
        return l_e if self.kind == "full" else l_t

    def sample(
        self, l_e: int, l_t: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions, loss mask) for one source sequence of length ``l_e`` (the whole one for full/da)."""
        if self.kind == "chunk":
            pos = chunk_sample(l_e, l_t, float(self.alpha), generator)
            return pos, torch.ones(len(pos), dtype=torch.bool)
        if self.kind == "prefix":
            return prefix_sample(l_e, l_t, float(self.alpha), generator)
        return torch.arange(l_e), torch.ones(l_e, dtype=torch.bool)


def labels_from_mask(input_ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """``labels`` (−100 where no loss) from a per-token loss mask; the last dim is the sequence.

    ``labels[t]`` keeps ``input_ids[t]`` when tokens t−1 and t both carry the mask (the prediction made at
    t−1 targets t; see the module docstring), and at t = 0 when token 0 does (never used by the shift).
    """
    keep = loss_mask.clone()
    keep[..., 1:] &= loss_mask[..., :-1]
    return torch.where(keep, input_ids, torch.full_like(input_ids, IGNORE_INDEX))


def sample_generator(seed: int, index: int) -> torch.Generator:
    """The generator of global sequence ``index`` under run ``seed`` (one per sequence: resume-exact)."""
    return torch.Generator().manual_seed((int(seed) * 1_000_003 + int(index)) % (2**63 - 1))


def segment(
    tokens: torch.Tensor, method: SegmentMethod, l_t: int, generator: torch.Generator | None = None
) -> dict[str, torch.Tensor]:
    """One training example from a source sequence: tokens at the sampled positions, with those positions.

    Returns ``input_ids``, ``position_ids`` (the original positions), ``loss_mask`` and ``labels``.
    """
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    pos, mask = method.sample(len(tokens), l_t, generator)
    ids = tokens[pos]
    return {"input_ids": ids, "position_ids": pos, "loss_mask": mask, "labels": labels_from_mask(ids, mask)}


def collate_segmented(
    sequences: Sequence[torch.Tensor],
    method: SegmentMethod | str,
    l_t: int,
    generators: Sequence[torch.Generator | None] | None = None,
) -> dict[str, torch.Tensor]:
    """A batch from equal-length source sequences (no packing: one document piece per row); ``method`` is a
    :class:`SegmentMethod` or its name (``"chunk-0.25"``).

    Returns ``input_ids``, ``position_ids`` (original positions), ``labels`` (−100 where no loss),
    ``loss_mask`` and an all-ones ``attention_mask``. The explicit mask matters: transformers 5 treats
    ``position_ids`` with gaps and no attention mask as *packed* sequences and blocks attention across the
    gaps, which would silently turn a chunk-α sequence into 1/α independent short ones.
    """
    method = SegmentMethod.parse(method) if isinstance(method, str) else method
    gens = list(generators) if generators is not None else [None] * len(sequences)
    if len(gens) != len(sequences):
        raise ValueError(f"{len(sequences)} sequences but {len(gens)} generators")
    rows = [segment(s, method, l_t, g) for s, g in zip(sequences, gens, strict=True)]
    batch = {
        k: torch.stack([r[k] for r in rows]) for k in ("input_ids", "position_ids", "loss_mask", "labels")
    }
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    return batch


class SegmentedCollator:
    """DataLoader collator: ``[{"input_ids": tokens, "index": k}, …]`` → a segmented batch.

    Example ``k`` (its global position in the training stream) is sampled with
    :func:`sample_generator` ``(seed, k)``, so the batch does not depend on worker or process layout.
    """

    def __init__(self, method: SegmentMethod | str, l_t: int, seed: int = 0):
        self.method = SegmentMethod.parse(method) if isinstance(method, str) else method
        self.l_t = int(l_t)
        self.seed = int(seed)

    def __call__(self, examples: Sequence[dict[str, object]]) -> dict[str, torch.Tensor]:
        seqs = [torch.as_tensor(e["input_ids"], dtype=torch.long) for e in examples]
        gens = [sample_generator(self.seed, int(e["index"])) for e in examples]  # type: ignore[arg-type]
        return collate_segmented(seqs, self.method, self.l_t, gens)
