"""Memory-efficient T5 encoder self-attention from the table of relative offsets (docs/design.md §9).

Stock transformers builds T5's relative position bias as a full (1, H, L, L) tensor in encoder block 0 and
shares it with every layer; its SDPA path then copies it once more (``create_position_bias_mask``) and, with
padding, expands it to (B, H, L, L). At 16k tokens that is 16.7 GiB for 8 heads. Here the bias is taken from
the (H, L_q + L_k − 1) table of relative offsets d = key − query: each offset is bucketed once with the stock
bucket function and looked up once in the learned embedding (paper A §2: T5's learned relative buckets).

The trick that makes the table usable without copies: the bias of query i and key j is T[j − i + L_q − 1],
a Toeplitz pattern whose rows run *backwards* through T (negative stride, which strided views and SDPA
cannot take). Softmax ignores the order of keys, so reversing keys and values along the sequence does not
change attention; with keys reversed, row i of the bias is F[i : i + L_k] of the flipped table F, a
zero-copy ``as_strided`` view with unit strides that SDPA accepts as ``attn_mask``.

Paths (all compute softmax((QKᵀ·scaling + bias)/τ + mask) with the mask *not* scaled, docs/design.md §5):

* ``sdpa`` (CPU default, no statistics): one SDPA call over the view per group of examples that share
  their valid key range. Right- or left-padding makes each example's valid keys one contiguous range, so
  padding is handled by slicing keys (and the bias view's columns), not by a mask; τ is folded into
  SDPA's ``scale`` and into the table (T/τ), so it costs nothing.
* ``explicit`` (statistics, or masks that are not one contiguous key range per example): tiles of one
  example, one head and a block of queries, about :data:`BLOCK_ELEMENTS` scores each; P_max and entropy
  (Algorithm 1) and the layer-0 logit vector (Propositions 1-2) are read from the same tile
  (``lengthx.attention.stats``).
* ``flex`` (CUDA default without statistics): FlexAttention with the table indexed in ``score_mod``.
  FlexAttention runs on CPU only through ``torch.compile`` and is slower there (docs/design.md §9), so it is never
  chosen automatically on CPU. Not exercised by the CPU test suite.

Hook (transformers 5.23): :func:`enable_efficient_t5` patches ``compute_bias`` of encoder block 0 only, so
it returns a :class:`RelativeBiasTable` instead of the (1, H, L, L) tensor; that object travels through
T5's ``position_bias`` argument to every encoder layer, and the one registered attention function
(``lengthx.attention.temperature.temperature_attention``, name "lengthx") hands such calls to
:meth:`RelativeBiasTable.attend`. The decoder's biases stay tensors, so decoder attention keeps the stock
path.
"""

from __future__ import annotations

import dataclasses
import logging
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from lengthx.attention.stats import EXP_FLOOR, softmax_stats_, softmax_sums_, stats_from_sums
from lengthx.attention.temperature import ATTN_NAME, register

if TYPE_CHECKING:
    from lengthx.attention.stats import AttentionStats

log = logging.getLogger(__name__)

MODES = ("auto", "always", "never")
BACKENDS = ("auto", "sdpa", "explicit", "flex")
DEFAULT_MIN_LENGTH = 2048  # mode "auto": inputs longer than this use the efficient path
SETTINGS_ATTR = "lengthx_efficient"  # on encoder block 0's attention module: an EfficientT5Settings
# Explicit path: a tile (one example, one head, a block of query rows) holds about this many scores (4 MiB
# in fp32), never fewer than MIN_BLOCK_ROWS rows. Tiles near the core's cache make the elementwise passes of
# softmax and statistics ~1.5-2x cheaper than all-head 1024-row blocks on this CPU (docs/design.md §9), while the
# QKᵀ and PV matmuls stay efficient.
BLOCK_ELEMENTS = 1 << 20
MIN_BLOCK_ROWS = 32
# The elementwise passes over a tile (bias, mask, softmax, statistics) run over chunks of rows of about
# this many scores (512 KiB in fp32): a chunk and, with statistics capture, its shifted scores fit the
# core's 2 MiB L2 together, so every pass after the first reads L2 instead of L3 (~2-3x cheaper per pass on
# this CPU). This is what keeps the statistics nearly free: they add one out-of-place shift into a
# chunk-sized scratch buffer and one fused read of two L2-resident chunks (``stats.softmax_sums_``).
CHUNK_ELEMENTS = 1 << 17


@dataclass(frozen=True)
class EfficientT5Settings:
    """How the encoder attention of one model is computed (config key ``attention.efficient``).

    ``mode``: ``auto`` = efficient for inputs longer than ``min_length`` tokens, stock below; ``always``;
    ``never``. ``backend``: ``auto`` (flex on CUDA, SDPA over the view on CPU), ``sdpa``, ``explicit``,
    ``flex``. With statistics capture on, the explicit path is used whatever the backend.
    """

    mode: str = "auto"
    min_length: int = DEFAULT_MIN_LENGTH
    backend: str = "auto"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown attention.efficient mode {self.mode!r}; "
                             f"valid modes: {', '.join(MODES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown efficient attention backend {self.backend!r}; "
                             f"valid backends: {', '.join(BACKENDS)}")

    def applies(self, length: int) -> bool:
        """Whether a sequence of ``length`` tokens uses the efficient path."""
        return self.mode == "always" or (self.mode == "auto" and length > self.min_length)


def relative_bias_table(
    attn: torch.nn.Module,
    query_length: int,
    key_length: int,
    device: torch.device | None = None,
    past_seen_tokens: int = 0,
) -> torch.Tensor:
    """The (H, L_q + L_k − 1) bias of each relative offset d = key − query, ascending from −(L_q − 1) − past.

    Each offset is bucketed once with T5's own bucket function and looked up once in block 0's embedding,
    so entry [h, j − i + L_q − 1] equals stock ``compute_bias(L_q, L_k)[0, h, i, j]`` exactly.
    """
    if device is None:
        device = attn.relative_attention_bias.weight.device
    past = int(past_seen_tokens)
    offsets = torch.arange(-(query_length - 1) - past, key_length - past, dtype=torch.long, device=device)
    buckets = attn._relative_position_bucket(
        offsets,
        bidirectional=not attn.is_decoder,
        num_buckets=attn.relative_attention_num_buckets,
        max_distance=attn.relative_attention_max_distance,
    )
    return attn.relative_attention_bias(buckets).transpose(0, 1)  # (H, L_q + L_k − 1)


class RelativeBiasTable:
    """T5's relative position bias as its offset table, standing in for the (1, H, L_q, L_k) tensor.

    Created by the patched ``compute_bias`` of encoder block 0 and passed by T5 to every encoder layer as
    ``position_bias``; the registered attention function recognises it (``lengthx_efficient``) and calls
    :meth:`attend`, which applies τ and feeds statistics like the explicit path of ``temperature.py``.
    """

    lengthx_efficient = True

    def __init__(self, table: torch.Tensor, query_length: int, key_length: int, backend: str = "auto"):
        if table.shape[-1] != query_length + key_length - 1:
            raise ValueError(f"offset table of width {table.shape[-1]} does not fit "
                             f"{query_length}x{key_length}")
        self.table = table
        self.query_length = query_length
        self.key_length = key_length
        self.backend = backend
        self._flipped: dict[tuple[float, torch.dtype, torch.device], torch.Tensor] = {}

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The shape of the stock bias this table stands for."""
        return (1, self.table.shape[0], self.query_length, self.key_length)

    def dense(self) -> torch.Tensor:
        """The stock (1, H, L_q, L_k) bias, materialised (for tests and debugging only)."""
        q = torch.arange(self.query_length, device=self.table.device)[:, None]
        k = torch.arange(self.key_length, device=self.table.device)[None, :]
        return self.table[:, k - q + self.query_length - 1][None]

    def flipped(self, tau: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """F = reversed T/τ, contiguous (H, L_q + L_k − 1); cached per (τ, dtype, device) for this forward."""
        key = (tau, dtype, device)
        if key not in self._flipped:
            t = self.table.to(device=device, dtype=dtype)
            self._flipped[key] = (t / tau if tau != 1.0 else t).flip(-1).contiguous()
        return self._flipped[key]

    def view(self, flipped: torch.Tensor, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
        """Zero-copy (H, q1 − q0, k1 − k0) bias of queries [q0, q1) and the *reversed* keys k1 − 1, …, k0.

        Entry (h, r, c) is F[h, (q0 + r) + (L_k − k1) + c] = T[h, (k1 − 1 − c) − (q0 + r) + L_q − 1].
        """
        return flipped.as_strided(
            (flipped.shape[0], q1 - q0, k1 - k0), (flipped.stride(0), 1, 1),
            flipped.storage_offset() + q0 + self.key_length - k1,
        )

    # ---- attention ---------------------------------------------------------------------------------------

    def attend(
        self,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        scaling: float | None = None,
        dropout: float = 0.0,
        tau: float = 1.0,
        stats: AttentionStats | None = None,
    ) -> torch.Tensor:
        """softmax((QKᵀ·scaling + bias)/τ + mask)·V for (B, H, L_q, D) inputs; returns (B, L_q, H, D)."""
        if tau <= 0:
            raise ValueError(f"temperature must be positive, got τ={tau} on {type(module).__name__}")
        b, h, q_len, d = query.shape
        k_len = key.shape[-2]
        if (q_len, k_len) != (self.query_length, self.key_length) or key.shape[1] != h:
            raise ValueError(f"relative bias table for {self.query_length}x{self.key_length} used on "
                             f"{q_len}x{k_len} attention")
        scale = (d ** -0.5 if scaling is None else scaling) / tau
        p_drop = dropout if module.training else 0.0
        backend = self.backend
        if backend == "auto":
            backend = "flex" if query.is_cuda and _flex_available() else "sdpa"
        if stats is not None:
            backend = "explicit"
        if backend == "flex" and p_drop == 0.0:
            keep = _key_keep(attention_mask, b, k_len)
            if keep is not None or attention_mask is None:
                try:
                    out = _flex_attend(query, key, value, self.table, q_len, keep, scale * tau, tau)
                    return out.transpose(1, 2).contiguous()
                except Exception as err:  # noqa: BLE001 - any compile/runtime failure: fall back, loudly
                    if self.backend == "flex":
                        raise
                    log.warning("FlexAttention failed (%s); falling back to the blockwise path", err)
            backend = "explicit"

        flipped = self.flipped(tau, query.dtype, query.device)
        ranges = _key_ranges(attention_mask, b, k_len)
        key_f = key.flip(2).contiguous()
        value_f = value.flip(2).contiguous()
        out = torch.empty(b, h, q_len, value.shape[-1], dtype=query.dtype, device=query.device)
        if ranges is None:  # a mask that is not one contiguous key range per example: explicit, masked
            keep = _key_keep(attention_mask, b, k_len)
            longest = int(keep.sum(-1).max()) if keep is not None else k_len  # logit-vector grid
            self._explicit(_Explicit(module, query, key_f, value_f, flipped, 0, k_len, attention_mask, scale, tau,
                                     p_drop, stats, out, grid_hint=longest))
            return out.transpose(1, 2).contiguous()

        groups: dict[tuple[int, int], list[int]] = {}
        for i, rng in enumerate(ranges):
            groups.setdefault(rng, []).append(i)
        for (k0, k1), members in sorted(groups.items(), key=lambda kv: kv[0][0] - kv[0][1]):  # longest first
            contiguous = members == list(range(members[0], members[-1] + 1))
            sel = (slice(members[0], members[-1] + 1) if contiguous
                   else torch.tensor(members, device=query.device))
            keys = slice(k_len - k1, k_len - k0)  # original keys [k0, k1) in the reversed order
            q_g, k_g, v_g = query[sel], key_f[sel][:, :, keys], value_f[sel][:, :, keys]
            if backend == "sdpa":
                bias = self.view(flipped, 0, q_len, k0, k1)[None]
                o_g = F.scaled_dot_product_attention(q_g, k_g, v_g, attn_mask=bias, dropout_p=p_drop,
                                                     scale=scale)
            else:
                o_g = query.new_empty(q_g.shape[0], h, q_len, v_g.shape[-1])
                self._explicit(_Explicit(module, q_g, k_g, v_g, flipped, k0, k1, None, scale, tau, p_drop, stats,
                                         o_g, row_range=(k0, k1), grid_hint=max(e - s for s, e in ranges)))
            if isinstance(sel, slice):
                out[sel] = o_g
            else:
                out.index_copy_(0, sel, o_g)
        return out.transpose(1, 2).contiguous()

    def _explicit(self, call: _Explicit) -> None:
        """Explicit softmax over tiles of (example, head, query block), keys reversed and restricted to
        [k0, k1), written into ``out`` (B, H, L_q, D).

        ``mask`` (additive or boolean, (B, 1, L_q|1, L_k), original key order) is added after the τ
        division, so it is never scaled. Statistics rows: ``row_range`` when the keys were sliced to a
        range (a query row is valid iff its own position lies in it), else the mask's diagonal. A tile is
        one head's scores for a block of queries (:data:`BLOCK_ELEMENTS`, for efficient matmuls); its
        elementwise passes run chunk by chunk (:data:`CHUNK_ELEMENTS`), so that each chunk stays in the
        core's L2 between passes. With statistics, the softmax is still done in place; the sums behind
        P_max and entropy cost one out-of-place shift and one fused row dot per chunk
        (``stats.softmax_sums_``), and P_max and entropy are formed once per call (docs/design.md §9).
        """
        if torch.is_grad_enabled() and any(t.requires_grad for t in (call.query, call.key_f, call.value_f,
                                                                      call.flipped)):
            self._explicit_autograd(call)
            return
        module, query, key_f, value_f, flipped, k0, k1, mask, scale, tau, p_drop, stats, out, row_range, \
            grid_hint = call.fields()
        b, h, q_len, d = query.shape
        n = k1 - k0
        rows = min(q_len, max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // max(1, n)))
        chunk = max(1, min(rows, CHUNK_ELEMENTS // max(1, n)))  # rows per elementwise chunk of a tile
        want_logits = stats is not None and stats.wants_logits(module)
        buf = query.new_empty(rows * n)
        f32 = dict(dtype=torch.float32, device=query.device)
        xbuf = None if query.dtype == torch.float32 else torch.empty(rows * n, **f32)  # fp32 scores
        zbuf = torch.empty(rows, **f32)  # Σ e per row of a tile (without statistics)
        if stats is not None:
            tbuf = torch.empty(chunk * n, **f32)  # a chunk's shifted scores max(s − m, EXP_FLOOR)
        mask_once = None
        if mask is not None and _query_independent(mask):
            mask_once = _to_additive(mask[:, :, :1], query.dtype).flip(-1)  # (B, 1, 1, L_k), reversed keys
        if stats is not None:  # per-row sums of this call; the statistics are formed and handed over at the end
            row_z = torch.empty(b, h, q_len, **f32)  # Σ e
            row_w = torch.empty_like(row_z)  # Σ e·(s − m)
            row_ok = torch.empty(b, q_len, dtype=torch.bool, device=query.device)
        for bi in range(b):
            for q0 in range(0, q_len, rows):
                q1 = min(q0 + rows, q_len)
                r = q1 - q0
                bias = self.view(flipped, q0, q1, k0, k1)  # (H, r, n)
                mblk = None
                if mask is not None:
                    mblk = (mask_once[bi] if mask_once is not None else
                            _to_additive(mask[bi, :, q0:q1], query.dtype).flip(-1))[0]  # (r|1, n)
                if stats is not None:
                    rv, kv = _row_validity(row_range, None if mblk is None else mblk[None, None], q0, q1, 1, n,
                                           query.device)
                    row_ok[bi, q0:q1] = rv[0]
                qs = query[bi, :, q0:q1] * scale  # (H, r, D)
                for hi in range(h):
                    z = zbuf[:r] if stats is None else row_z[bi, hi, q0:q1]
                    x = torch.mm(qs[hi], key_f[bi, hi].transpose(0, 1), out=buf[: r * n].view(r, n))
                    bias_h = bias[hi]
                    if want_logits:  # the logits l/τ of the whole tile, before the mask
                        x.add_(bias_h)
                        stats.add_logits(module, x[None, None], rv, kv, tau=tau, grid_hint=grid_hint)
                        bias_h = None
                    e = x if xbuf is None else xbuf[: r * n].view(r, n)  # fp32, becomes exp(s − m)
                    _tile_exp_(x, e, bias_h, mblk, chunk, z, None if stats is None else tbuf,
                               None if stats is None else row_w[bi, hi, q0:q1])
                    o = out[bi, hi, q0:q1]
                    if p_drop:
                        p = F.dropout(e / z[:, None], p_drop, training=True)
                        torch.mm(p.to(value_f.dtype), value_f[bi, hi], out=o)
                    else:
                        torch.mm(e.to(value_f.dtype), value_f[bi, hi], out=o)
                        o.div_(z[:, None].to(o.dtype))
        if stats is not None:
            stats.add_rows(module, *stats_from_sums(row_z, row_w), row_ok)

    def _explicit_autograd(self, call: _Explicit) -> None:
        """The explicit path out of place, for training (gradients flow to Q, K, V and the bias table).

        Query blocks over all heads; statistics (if any) from a detached copy of the scores. Writes the
        block outputs into ``out`` with autograd-tracked copies.
        """
        module, query, key_f, value_f, flipped, k0, k1, mask, scale, tau, p_drop, stats, out, row_range, _ = \
            call.fields()
        b, h, q_len, _ = query.shape
        n = k1 - k0
        rows = min(q_len, max(MIN_BLOCK_ROWS, BLOCK_ELEMENTS // max(1, b * h * n)))
        independent = mask is not None and _query_independent(mask)
        pmaxes, entropies, oks = [], [], []
        for q0 in range(0, q_len, rows):
            q1 = min(q0 + rows, q_len)
            logits = torch.matmul(query[:, :, q0:q1] * scale, key_f.transpose(-1, -2))
            logits = logits + self.view(flipped, q0, q1, k0, k1)
            mblk = None
            if mask is not None:
                mrows = mask[:, :, :1] if independent else mask[:, :, q0:q1]
                mblk = _to_additive(mrows, logits.dtype).flip(-1)
            x = logits if mblk is None else logits + mblk
            if stats is not None:
                rv, kv = _row_validity(row_range, mblk, q0, q1, b, n, x.device)
                if stats.wants_logits(module):
                    stats.add_logits(module, logits.detach(), rv, kv, tau=tau)
                _, _, pmax, entropy = softmax_stats_(x.detach().float().clone())
                pmaxes.append(pmax)
                entropies.append(entropy)
                oks.append(rv)
            p = torch.softmax(x.float(), -1).to(value_f.dtype)
            p = F.dropout(p, p_drop, training=True) if p_drop else p
            out[:, :, q0:q1] = torch.matmul(p, value_f)
        if stats is not None:
            stats.add_rows(module, torch.cat(pmaxes, -1), torch.cat(entropies, -1), torch.cat(oks, -1))


@dataclass
class _Explicit:
    """One call of the explicit path: queries, keys and values (keys reversed, restricted to [k0, k1)), the
    flipped bias table, the mask, scale, τ, dropout, the statistics to feed and the output to write."""

    module: torch.nn.Module
    query: torch.Tensor
    key_f: torch.Tensor
    value_f: torch.Tensor
    flipped: torch.Tensor
    k0: int
    k1: int
    mask: torch.Tensor | None
    scale: float
    tau: float
    p_drop: float
    stats: AttentionStats | None
    out: torch.Tensor
    row_range: tuple[int, int] | None = None
    grid_hint: int | None = None

    def fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


def _tile_exp_(x: torch.Tensor, e: torch.Tensor, bias: torch.Tensor | None, mask: torch.Tensor | None, chunk: int,
               z: torch.Tensor, tbuf: torch.Tensor | None, row_w: torch.Tensor | None) -> None:
    """The elementwise passes of one (r, n) tile of scores ``x``: + bias, + mask, then ``e`` = exp(s − m) in
    place (``e`` is ``x`` or its fp32 copy) with the row sums Σe in ``z`` and, with statistics (``tbuf``), the
    sums Σe·(s − m) in ``row_w``. They run over chunks of rows small enough that a chunk and its shifted
    scores stay in the core's L2 between passes (:data:`CHUNK_ELEMENTS`); the matmuls keep the whole tile."""
    r, n = x.shape
    for c0 in range(0, r, chunk):
        c1 = min(c0 + chunk, r)
        xc = x[c0:c1]
        if bias is not None:
            xc.add_(bias[c0:c1])
        if mask is not None:
            xc.add_(mask if mask.shape[0] == 1 else mask[c0:c1])
        if e is not x:  # softmax and statistics in fp32
            xc = e[c0:c1].copy_(xc)
        if tbuf is None:
            xc.sub_(xc.amax(-1, keepdim=True)).clamp_(min=EXP_FLOOR).exp_()  # no denormals
            torch.sum(xc, -1, out=z[c0:c1])
        else:
            softmax_sums_(xc, tbuf[: (c1 - c0) * n].view(c1 - c0, n), z[c0:c1], row_w[c0:c1])


def _row_validity(row_range: tuple[int, int] | None, mblk: torch.Tensor | None, q0: int, q1: int, batch: int,
                  n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(valid query rows, valid keys) of a block for the statistics: ``row_range`` when the keys were sliced
    to a range (a row is valid iff its own position lies in it), else the block mask's diagonal."""
    if row_range is not None:
        return _rows_in(row_range, q0, q1, batch, device), None
    return _validity_flipped(mblk, batch, q1 - q0, n, q0)


# ---- masks -------------------------------------------------------------------------------------------


def _query_independent(mask: torch.Tensor) -> bool:
    """Whether a (B, 1, L_q, L_k) mask is the same for every query (a padding mask)."""
    if mask.dim() != 4 or mask.shape[1] != 1:
        return False
    if mask.shape[-2] == 1 or mask.stride(-2) == 0:
        return True
    return bool(torch.equal(mask, mask[:, :, :1].expand_as(mask)))  # a materialised padding mask


def _key_keep(mask: torch.Tensor | None, batch: int, k_len: int) -> torch.Tensor | None:
    """(B, L_k) boolean keep-vector of a query-independent mask; None without a mask or when rows differ."""
    if mask is None or not _query_independent(mask):
        return None
    row = mask[:, 0, 0, :]
    keep = row if row.dtype == torch.bool else row > torch.finfo(row.dtype).min / 2
    return keep.expand(batch, k_len)


def _key_ranges(mask: torch.Tensor | None, batch: int, k_len: int) -> list[tuple[int, int]] | None:
    """Each example's valid keys as one range [k0, k1), or None when some example's are not contiguous.

    True for no mask, right padding and left padding; None for masks that vary over queries or have holes.
    """
    if mask is None:
        return [(0, k_len)] * batch
    keep = _key_keep(mask, batch, k_len)
    if keep is None:
        return None
    keep = keep.cpu()
    count = keep.sum(-1)
    if bool((count == 0).any()):
        return None
    first = keep.to(torch.int8).argmax(-1)
    last = k_len - 1 - keep.flip(-1).to(torch.int8).argmax(-1)
    if not bool((last - first + 1 == count).all()):
        return None
    return [(int(f), int(e) + 1) for f, e in zip(first.tolist(), last.tolist(), strict=True)]


def _to_additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean keep-mask → additive float mask (masked = dtype's minimum); float masks are cast."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~mask, torch.finfo(dtype).min)


def _rows_in(rng: tuple[int, int], q0: int, q1: int, batch: int, device: torch.device) -> torch.Tensor:
    pos = torch.arange(q0, q1, device=device)
    return ((pos >= rng[0]) & (pos < rng[1]))[None].expand(batch, -1)


def _validity_flipped(
    mblk: torch.Tensor | None, batch: int, rows: int, keys: int, q0: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(row_valid (B, rows), key_valid (B, rows|1, keys)) of a flipped additive mask block of full key width.

    Query row q0 + i owns key q0 + i, which sits at column L_k − 1 − (q0 + i) after the flip.
    """
    if mblk is None:
        return torch.ones(batch, rows, dtype=torch.bool), None
    keep = (mblk > torch.finfo(mblk.dtype).min / 2)[:, 0]  # (B, rows|1, K)
    idx = torch.arange(rows, device=mblk.device)
    row_idx = idx if keep.shape[-2] > 1 else torch.zeros_like(idx)
    row_valid = keep[:, row_idx, (keys - 1 - (q0 + idx)).clamp(min=0)]
    return row_valid.expand(batch, rows), keep.expand(batch, *keep.shape[1:])


# ---- FlexAttention (CUDA) ---------------------------------------------------------------------------------

_FLEX: dict[str, Any] = {}


def _flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:  # pragma: no cover - torch without FlexAttention
        return False
    return True


def _flex_attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    table: torch.Tensor,
    q_len: int,
    keep: torch.Tensor | None,
    scaling: float,
    tau: float,
) -> torch.Tensor:
    """FlexAttention: score_mod adds T[h, j − i + L_q − 1] and divides by τ; padding is a block mask.

    Untested on CPU (FlexAttention needs ``torch.compile`` there, docs/design.md §9); only chosen on CUDA.
    """
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if "fn" not in _FLEX:
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    tbl = (table / tau).to(device=query.device, dtype=query.dtype).contiguous()
    inv_tau = torch.tensor(1.0 / tau, device=query.device, dtype=query.dtype)
    off = q_len - 1

    def score_mod(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 - FlexAttention's callback signature
        return score * inv_tau + tbl[h, kv_idx - q_idx + off]

    block_mask = None
    if keep is not None:
        keep_d = keep.to(query.device)

        def mask_mod(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
            return keep_d[b, kv_idx]

        block_mask = create_block_mask(mask_mod, query.shape[0], None, q_len, key.shape[-2],
                                       device=query.device)
    return _FLEX["fn"](query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scaling)


# ---- enabling on a model -----------------------------------------------------------------------------------


def _encoder_block0_attention(model: torch.nn.Module) -> torch.nn.Module:
    stack = getattr(model, "encoder", model)
    blocks = getattr(stack, "block", None)
    if blocks is None or getattr(stack, "is_decoder", False):
        raise ValueError(f"efficient T5 attention needs a T5 model with an encoder; "
                         f"got {type(model).__name__}")
    attn = blocks[0].layer[0].SelfAttention
    if not getattr(attn, "has_relative_attention_bias", False):
        raise ValueError("encoder block 0 has no relative attention bias; is this a T5 model?")
    return attn


def _efficient_compute_bias(
    self: torch.nn.Module,
    query_length: int,
    key_length: int,
    device: torch.device | None = None,
    past_seen_tokens: int = 0,
) -> torch.Tensor | RelativeBiasTable:
    """Patched ``compute_bias`` of encoder block 0: the offset table for long inputs, stock otherwise."""
    settings: EfficientT5Settings | None = getattr(self, SETTINGS_ATTR, None)
    if (
        settings is None
        or not settings.applies(max(int(query_length), int(key_length)))
        or self.config._attn_implementation != ATTN_NAME  # only our attention function understands the table
    ):
        return type(self).compute_bias(self, query_length, key_length, device=device,
                                       past_seen_tokens=past_seen_tokens)
    table = relative_bias_table(self, int(query_length), int(key_length), device, past_seen_tokens)
    return RelativeBiasTable(table, int(query_length), int(key_length), backend=settings.backend)


def enable_efficient_t5(
    model: torch.nn.Module,
    mode: str = "auto",
    min_length: int = DEFAULT_MIN_LENGTH,
    backend: str = "auto",
) -> None:
    """Compute ``model``'s T5 encoder self-attention from the offset table (config ``attention.efficient``).

    ``mode``: ``auto`` (inputs longer than ``min_length`` tokens; stock below, so short inputs are
    unchanged), ``always``, or ``never`` (same as :func:`disable_efficient_t5`). Switches the model to the
    "lengthx" attention implementation (τ = 1 and no statistics there is stock SDPA), and patches encoder
    block 0's ``compute_bias`` only; the decoder is untouched. Idempotent; calling again changes settings.
    """
    settings = EfficientT5Settings(mode=mode, min_length=int(min_length), backend=backend)
    attn = _encoder_block0_attention(model)
    if mode == "never":
        disable_efficient_t5(model)
        return
    register()
    if getattr(model.config, "_attn_implementation", None) != ATTN_NAME:
        model.set_attn_implementation(ATTN_NAME)
    setattr(attn, SETTINGS_ATTR, settings)
    attn.compute_bias = types.MethodType(_efficient_compute_bias, attn)


def disable_efficient_t5(model: torch.nn.Module) -> None:
    """Undo :func:`enable_efficient_t5`: stock ``compute_bias`` (the attention implementation is kept)."""
    attn = _encoder_block0_attention(model)
    attn.__dict__.pop("compute_bias", None)
    if hasattr(attn, SETTINGS_ATTR):
        delattr(attn, SETTINGS_ATTR)


def efficient_t5_settings(model: torch.nn.Module) -> EfficientT5Settings | None:
    """The settings :func:`enable_efficient_t5` installed on ``model``, or None when it is off."""
    return getattr(_encoder_block0_attention(model), SETTINGS_ATTR, None)
