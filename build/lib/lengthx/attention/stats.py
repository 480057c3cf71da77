"""Attention statistics for Algorithm 1 and Propositions 1-2 (paper A §4-§5, docs/design.md §5, §9).

An :class:`AttentionStats` is attached to the attention modules it watches; the attention paths
(``lengthx.attention.temperature`` and ``lengthx.attention.tiled_softmax``) feed it one query block at a
time, so no more than one block of scores ever exists. Only *valid* query rows count (a padding token's own
row is skipped), and masked keys carry zero probability, so they drop out of both statistics.

Two families of statistics:

* **P_max and entropy** (Algorithm 1's FindS) of softmax(l/τ), per (layer, head), averaged over valid query
  rows. From a block of scores s (already divided by τ, masked keys at −∞) with row maximum m and
  Z = Σ exp(s − m): P_max = 1/Z and H = log Z − Σ exp(s − m)(s − m) / Z, so both come almost free once the
  scores exist (:func:`softmax_stats_`; :func:`softmax_sums_` is the in-place form the T5 explicit path uses
  chunk by chunk: the extra cost over a plain softmax is one out-of-place shift and one fused row dot).
* **The average logit vector of one layer** (opt-in, layer 0 by default; Propositions 1-2, Table 7,
  Figures 2/5): sort each of the H×L pre-softmax logit vectors l = QKᵀ·scaling + bias (one per head and
  valid query row, over the valid keys only), average them entry-wise and shift the result to zero mean.
  σ is its standard deviation, l_max its largest entry, and its quantiles against N(0, σ²) give the QQ plot.

  *Temperature.* The vector is always of the raw logits l, i.e. at τ = 1, whatever τ is in effect during
  the pass (Propositions 1-2 take σ of the raw logits; the vector at temperature τ is exactly l̄/τ, because
  sorting and averaging commute with a positive scale — :meth:`AttentionStats.logit_vector` takes ``tau``).

  *Padding.* Without padding every vector has the same length L and the average is the plain entry-wise
  mean. With padding a row over n < G valid keys is resampled to a common grid of G points by linear
  interpolation of its sorted values at positions k·(n−1)/(G−1), k = 0…G−1 (its empirical quantile
  function evaluated on an even grid), before averaging. G is ``logit_grid`` when given, else the longest
  valid key count of the first batch seen (the attention paths pass it as ``grid_hint``), so rows of that
  length are taken exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

# the logit-vector capture sorts at most this many logits at once (an 8 MiB fp32 copy, docs/design.md §9)
STATS_ATTR = "lengthx_stats"  # the attribute an AttentionStats attaches itself under, on each module it watches
SORT_CHUNK_ELEMENTS = 1 << 21


# exp(s − m) is computed from max(s − m, EXP_FLOOR): e^−80 ≈ 1.8e-35 is still a normal fp32 number, so no
# denormals arise (ops on denormals are ~5-15x slower on x86, and a wide score spread at long lengths makes
# many of them); a key below the floor keeps a weight ≤ 1.8e-35 instead of a smaller one, which changes no
# fp32 softmax output, P_max or entropy (masked keys included: they add ≤ L·1.8e-35 to Z ≥ 1).
EXP_FLOOR = -80.0


def softmax_stats_(
    scores: torch.Tensor, probs_out: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unnormalised softmax of a score block plus P_max and entropy per row, mostly in place (docs/design.md §9).

    ``scores`` (…, K) holds s = l/τ + mask (masked keys at a very negative finite value); it is
    overwritten with max(s − m, EXP_FLOOR). Returns ``(e, z, pmax, entropy)`` with
    e = exp(max(s − m, EXP_FLOOR)) (written to ``probs_out`` when given, a buffer shaped like ``scores``),
    z = Σ e, pmax = 1/z and entropy = log z − Σ e(s − m)/z. The normalised probabilities are e / z[..., None].
    """
    m = scores.amax(-1, keepdim=True)
    scores.sub_(m).clamp_(min=EXP_FLOOR)
    e = torch.exp(scores, out=probs_out) if probs_out is not None else torch.exp(scores)
    z = e.sum(-1)
    pmax, entropy = stats_from_sums(z, row_dot(scores, e))
    return e, z, pmax, entropy


def softmax_sums_(
    scores: torch.Tensor,
    shifted: torch.Tensor | None = None,
    sums_out: torch.Tensor | None = None,
    weighted_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The passes of :func:`softmax_stats_` with the softmax in place: ``(e, z, Σ e·(s − m))`` per row.

    ``scores`` (…, K) is overwritten with e = exp(max(s − m, EXP_FLOOR)), the unnormalised softmax, exactly
    as a plain softmax path leaves it; the shifted scores max(s − m, EXP_FLOOR) go to ``shifted`` (a
    scratch buffer shaped like ``scores``, small enough to stay in cache; a new tensor when None). Against a
    plain in-place softmax (row max, shift, floor, exp, row sum) the statistics cost one out-of-place shift
    and one fused read of both blocks (:func:`row_dot`, no product is materialised). ``sums_out`` and
    ``weighted_out`` (…,) take z and the weighted sum when given, so a caller can fill a block's rows chunk
    by chunk and finish with :func:`stats_from_sums` once.
    """
    m = scores.amax(-1, keepdim=True)
    t = torch.sub(scores, m, out=shifted) if shifted is not None else scores - m
    t.clamp_(min=EXP_FLOOR)
    e = torch.exp(t, out=scores)
    weighted = row_dot(t, e, out=weighted_out)  # first, while t and e are the most recently touched
    z = e.sum(-1) if sums_out is None else torch.sum(e, -1, out=sums_out)
    return e, z, weighted


def stats_from_sums(z: torch.Tensor, weighted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(P_max, entropy) = (1/z, log z − Σ e(s − m)/z) from the row sums of :func:`softmax_sums_`."""
    pmax = z.reciprocal()
    return pmax, z.log() - weighted * pmax


_NP_VECDOT = getattr(np, "vecdot", None)  # NumPy >= 2
_NP_DTYPES = (torch.float32, torch.float64)


def row_dot(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Σ_k a[..., k]·b[..., k] without materialising the product (written to ``out`` (…,) when given).

    On the CPU (fp32/fp64, no autograd) NumPy's ``vecdot`` reads both operands once per row (a BLAS dot:
    ~2x faster than ``torch.linalg.vecdot``, which writes the product first, and as accurate, since
    its SIMD lanes accumulate separately); otherwise ``torch.linalg.vecdot``. The checks are kept cheap:
    the explicit attention path calls this once per chunk of rows.
    """
    if (_NP_VECDOT is not None and a.is_cpu and b.is_cpu and a.dtype in _NP_DTYPES and b.dtype == a.dtype
            and not a.requires_grad and not b.requires_grad
            and (out is None or (out.is_cpu and out.dtype == a.dtype and not out.requires_grad))):
        try:
            if out is not None:
                _NP_VECDOT(a.numpy(), b.numpy(), out=out.numpy())
                return out
            return torch.from_numpy(np.asarray(_NP_VECDOT(a.numpy(), b.numpy())))
        except ValueError:  # shapes that do not match: let torch broadcast or raise
            pass
    res = torch.linalg.vecdot(a, b)
    return res if out is None else out.copy_(res)


def validity_from_mask(
    mask: torch.Tensor | None, batch: int, rows: int, keys: int, key_offset: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(row_valid (B, rows), key_valid (B, rows|1, keys) or None) of an additive or boolean mask block.

    Query row i is position ``key_offset + i`` among the keys; it is valid when its own key is unmasked
    (self-attention: padding is shared by queries and keys). ``key_valid`` is None without a mask.
    """
    if mask is None:
        return torch.ones(batch, rows, dtype=torch.bool), None
    keep = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    keep = keep[:, 0]  # (B, rows|1, K): the head dim of transformers' masks is 1
    idx = torch.arange(rows, device=mask.device)
    row_idx = idx if keep.shape[-2] > 1 else torch.zeros_like(idx)
    row_valid = keep[:, row_idx, (key_offset + idx).clamp(max=keys - 1)]
    return row_valid.expand(batch, rows), keep.expand(batch, *keep.shape[1:])


class AttentionStats:
    """Per (layer, head) sums of P_max and entropy H over valid query rows, for the modules given.

    ``logit_vector=True`` additionally collects the average logit vector of ``modules[logit_layer]``
    (layer 0 of the encoder for the T5 adapter's module list; see the module docstring for the exact
    definition with padding and temperature). It costs a sort of every logit row of that layer.
    """

    def __init__(
        self,
        modules: Sequence[torch.nn.Module],
        logit_vector: bool = False,
        logit_layer: int = 0,
        logit_grid: int | None = None,
        row_stride: int = 1,
    ):
        if row_stride < 1:
            raise ValueError(f"row_stride must be >= 1, got {row_stride}")
        self.modules = list(modules)
        # P_max/entropy from every row_stride-th query row only (an estimate of S̄ at a fraction of the cost;
        # the attention output then takes the fast path). 1 = every row, exactly as Algorithm 1 states.
        self.row_stride = int(row_stride)
        self._index = {id(m): i for i, m in enumerate(self.modules)}
        self._pmax: torch.Tensor | None = None  # (layers, heads), float64 sums
        self._entropy: torch.Tensor | None = None
        self._rows = torch.zeros(len(self.modules), dtype=torch.float64)
        self._logit_module = id(self.modules[logit_layer]) if logit_vector and self.modules else None
        self._grid = logit_grid
        self._lv_sum: torch.Tensor | None = None  # (G,), float64
        self._lv_count = 0

    def __enter__(self) -> AttentionStats:
        for m in self.modules:
            setattr(m, STATS_ATTR, self)
        return self

    def __exit__(self, *exc: object) -> None:
        for m in self.modules:
            if getattr(m, STATS_ATTR, None) is self:
                delattr(m, STATS_ATTR)

    # ---- P_max and entropy -------------------------------------------------------------------------------

    def add(
        self,
        module: torch.nn.Module,
        probs: torch.Tensor,
        mask: torch.Tensor | None,
        key_offset: int,
    ) -> None:
        """Accumulate a block: ``probs`` (B, H, q, K); query row i is position ``key_offset + i`` among keys.

        A row is valid when its own position is an unmasked key (self-attention: padding is shared).
        """
        b, _, q, k = probs.shape
        valid, _ = validity_from_mask(mask, b, q, k, key_offset)
        self.add_rows(module, probs.amax(-1), torch.special.entr(probs).sum(-1), valid)

    def add_rows(
        self, module: torch.nn.Module, pmax: torch.Tensor, entropy: torch.Tensor, valid: torch.Tensor
    ) -> None:
        """Accumulate per-row statistics ``pmax`` and ``entropy`` (B, H, q) of the rows ``valid`` (B, q)."""
        layer = self._index[id(module)]
        h = pmax.shape[1]
        w = valid[:, None, :].to(device=pmax.device, dtype=torch.float64)
        pm, en = (pmax.double() * w).sum((0, 2)), (entropy.double() * w).sum((0, 2))
        if self._pmax is None:
            self._pmax = torch.zeros(len(self.modules), h, dtype=torch.float64)
            self._entropy = torch.zeros(len(self.modules), h, dtype=torch.float64)
        self._pmax[layer] += pm.cpu()
        self._entropy[layer] += en.cpu()
        self._rows[layer] += float(valid.sum())

    def _per_head(self, sums: torch.Tensor | None) -> torch.Tensor:
        if sums is None or bool((self._rows == 0).any()):
            raise RuntimeError("no attention statistics were recorded for some watched module: run a forward "
                               "pass "
                               "with the lengthx attention implementation first")
        return sums / self._rows[:, None]

    def pmax(self) -> torch.Tensor:
        """Mean P_max per (layer, head)."""
        return self._per_head(self._pmax)

    def entropy(self) -> torch.Tensor:
        """Mean entropy (nats) per (layer, head)."""
        return self._per_head(self._entropy)

    def mean(self, mode: str) -> float:
        """S̄ of Algorithm 1: the mean over layers, heads and valid query rows (``pmax`` or ``entropy``)."""
        per_head = {"pmax": self.pmax, "entropy": self.entropy}[mode]()
        return float(per_head.mean())

    # ---- average logit vector (Propositions 1-2) ---------------------------------------------------------

    def wants_logits(self, module: torch.nn.Module) -> bool:
        """Whether the attention path should pass this module's pre-softmax logits to :meth:`add_logits`."""
        return self._logit_module is not None and id(module) == self._logit_module

    def add_logits(
        self,
        module: torch.nn.Module,
        logits: torch.Tensor,
        row_valid: torch.Tensor,
        key_valid: torch.Tensor | None = None,
        tau: float = 1.0,
        grid_hint: int | None = None,
    ) -> None:
        """Accumulate sorted logit rows of a block for the average logit vector.

        ``logits`` (B, H, q, K) are l/``tau`` (the raw logits scaled by the τ in effect; they are multiplied
        back, so the vector is of l). Only rows ``row_valid`` (B, q) count, each over its keys
        ``key_valid`` (B, q|1, K) (all keys when None). Key order does not matter (rows are sorted).
        """
        if not self.wants_logits(module):
            return
        b_size, h, q, k = logits.shape
        if self._grid is None:
            if grid_hint is None:
                grid_hint = k if key_valid is None else int(key_valid.sum(-1).max())
            self._grid = max(int(grid_hint), 1)
        grid = self._grid
        if self._lv_sum is None:
            self._lv_sum = torch.zeros(grid, dtype=torch.float64)
        chunk = max(1, SORT_CHUNK_ELEMENTS // max(1, h * k))
        for b in range(b_size):
            rows = row_valid[b].nonzero().squeeze(-1)
            for c0 in range(0, rows.numel(), chunk):
                sel = rows[c0:c0 + chunk].to(logits.device)
                x = logits[b].index_select(1, sel).float()  # (H, c, K), a copy
                if key_valid is None:
                    counts = None
                else:
                    kv = key_valid[b]
                    kv = kv.index_select(0, sel) if kv.shape[0] > 1 else kv.expand(sel.numel(), k)
                    x.masked_fill_(~kv[None], math.inf)  # masked keys sort to the end
                    counts = kv.sum(-1).repeat(h)
                x = _sort_rows_(x).reshape(-1, k)
                # resampling is linear, so rows of equal length are summed first and resampled once
                lengths = [k] if counts is None else counts.unique().tolist()
                for n in lengths:
                    rows_n = x if counts is None or len(lengths) == 1 else x[counts == n]
                    colsum = rows_n[:, :n].sum(0).double().cpu()  # fp32 cascade sum; no fp64 copy
                    self._lv_sum += _resample(colsum, grid) * float(tau)
                    self._lv_count += rows_n.shape[0]

    def logit_vector(self, tau: float = 1.0) -> torch.Tensor:
        """The zero-mean average logit vector (ascending, length G, float64) of raw logits l / ``tau``."""
        if self._lv_sum is None or self._lv_count == 0:
            raise RuntimeError("no logit vector was recorded: create AttentionStats(..., logit_vector=True) "
                               "and run a forward pass with the lengthx attention implementation")
        v = self._lv_sum / self._lv_count
        return (v - v.mean()) / float(tau)

    def logit_sigma(self, tau: float = 1.0) -> float:
        """σ of the average logit vector (population standard deviation over its G entries)."""
        return float(self.logit_vector(tau).std(correction=0))

    def logit_lmax(self, tau: float = 1.0) -> float:
        """l_max: the largest entry of the zero-mean average logit vector (paper A Table 7)."""
        return float(self.logit_vector(tau).max())

    def logit_qq(self, points: int | None = None, tau: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """(theoretical, sample) quantiles for a QQ plot against N(0, σ²) (paper A Figures 2/5).

        Entry k of the G-entry vector is matched with σ·Φ⁻¹((k + 0.5)/G); ``points`` evenly spaced entries
        are kept when given.
        """
        v = self.logit_vector(tau)
        g = v.numel()
        probs = (torch.arange(g, dtype=torch.float64) + 0.5) / g
        theo = float(v.std(correction=0)) * torch.special.ndtri(probs)
        if points is not None and points < g:
            idx = torch.linspace(0, g - 1, points).round().long()
            theo, v = theo[idx], v[idx]
        return theo, v

    @property
    def logit_rows(self) -> int:
        """How many logit vectors (head × valid query row) were averaged."""
        return self._lv_count


def _sort_rows_(x: torch.Tensor) -> torch.Tensor:
    """Sort the last dim of a float32 tensor ascending, in place when it lives on the CPU.

    NumPy's SIMD sort is much faster than ``torch.sort`` on CPU and needs no int64 index tensor.
    """
    if x.device.type == "cpu" and x.is_contiguous():
        x.numpy().sort(axis=-1)
        return x
    return x.sort(-1).values


def _resample(v: torch.Tensor, grid: int) -> torch.Tensor:
    """A sorted vector of length n → ``grid`` points by linear interpolation at k·(n−1)/(grid−1); exact when
    n == grid. (Applied to sums of sorted rows, which is the sum of the resampled rows.)"""
    n = v.numel()
    if n == grid:
        return v
    if grid == 1 or n == 1:
        return v[:1].expand(grid) if n == 1 else v[:1]
    pos = torch.arange(grid, dtype=torch.float64) * (n - 1) / (grid - 1)
    lo = pos.floor().long().clamp(max=n - 1)
    hi = (lo + 1).clamp(max=n - 1)
    w = pos - lo.to(torch.float64)
    return v[lo] * (1 - w) + v[hi] * w
