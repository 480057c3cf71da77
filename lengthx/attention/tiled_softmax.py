"""Memory-lean attention kernels over a relative-offset bias table (docs/design.md §9).

The bias enters as F, the *flipped* (H, L_q + L_k − 1) table of the offsets d = key − query (built by
:class:`lengthx.attention.t5_bias.RelativeBiasTable`), with keys and values reversed along the sequence:
then the bias of a block of queries is a zero-copy view of F (:func:`offset_view`). Two kernels compute
softmax((QKᵀ·scaling + bias)/τ + mask)·V from it, with the mask *not* scaled (docs/design.md §5):

* :func:`explicit_attention`: the explicit softmax over tiles of one example, one head and a block of
  queries, about :data:`BLOCK_ELEMENTS` scores each, written into a preallocated output. P_max and entropy
  (Algorithm 1) and the layer-0 logit vector (Propositions 1-2) are read from the same tile
  (``lengthx.attention.stats``). With gradients (training), and on accelerators, it runs out of place over
  blocks of query rows of all heads at once (:data:`DEVICE_BLOCK_ELEMENTS` scores there).
* :func:`flex_attend`: FlexAttention with the table indexed in ``score_mod`` (CUDA; on CPU it runs only
  through ``torch.compile`` and is slower there, so it is never chosen automatically on CPU).

The mask helpers (:func:`key_keep`, :func:`key_ranges`) tell whether a mask is a padding mask whose valid
keys form one contiguous range per example, the case the SDPA path handles by slicing keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from lengthx.attention.stats import EXP_FLOOR, softmax_stats_, softmax_sums_, stats_from_sums

if TYPE_CHECKING:
    from lengthx.attention.stats import AttentionStats

# A tile (one example, one head, a block of query rows) holds about this many scores (4 MiB in fp32), never
# fewer than MIN_BLOCK_ROWS rows: tiles near the core's cache keep the elementwise passes of softmax and
# statistics cheap while the QKᵀ and PV matmuls stay efficient (docs/design.md §9).
BLOCK_ELEMENTS = 1 << 20
MIN_BLOCK_ROWS = 32
# The elementwise passes over a tile (bias, mask, softmax, statistics) run over chunks of rows of about
# this many scores (512 KiB in fp32): a chunk and, with statistics capture, its shifted scores fit a
# typical 2 MiB L2 together, so every pass after the first reads L2 instead of L3. This is what keeps the
# statistics nearly free: they add one out-of-place shift into a chunk-sized scratch buffer and one fused
# read of two L2-resident chunks (``stats.softmax_sums_``).
CHUNK_ELEMENTS = 1 << 17
# On an accelerator a tile per (example, head) would launch tens of kernels per few thousand scores: there the
# explicit path takes blocks of query rows over all examples and heads at once (``_explicit_blocks``), each of
# about this many scores (1 GiB in fp32), so a layer at 15k tokens is a few dozen blocks, and the memory of a
# block stays the same at every length.
DEVICE_BLOCK_ELEMENTS = 1 << 28
TILED_DEVICES = ("cpu",)  # device types that take the per-head tiles; every other type takes the blocks


def offset_view(flipped: torch.Tensor, key_length: int, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
    """Zero-copy (H, q1 − q0, k1 − k0) bias of queries [q0, q1) and the *reversed* keys k1 − 1, …, k0.

    ``flipped`` is F = the reversed (H, L_q + L_k − 1) offset table T, ``key_length`` = L_k. Entry (h, r, c)
    is F[h, (q0 + r) + (L_k − k1) + c] = T[h, (k1 − 1 − c) − (q0 + r) + L_q − 1].
    """
    return flipped.as_strided(
        (flipped.shape[0], q1 - q0, k1 - k0), (flipped.stride(0), 1, 1),
        flipped.storage_offset() + q0 + key_length - k1,
    )


@dataclass
class ExplicitCall:
    """One call of :func:`explicit_attention`: queries, keys and values (keys reversed, restricted to
    [k0, k1) of ``key_length``), the flipped bias table, the mask, scale, τ, dropout, the statistics to feed
    and the output to write. ``row_range``: the keys were sliced to this range (a query row is valid for the
    statistics iff its own position lies in it); ``grid_hint``: the logit-vector grid length."""

    module: torch.nn.Module
    query: torch.Tensor
    key_f: torch.Tensor
    value_f: torch.Tensor
    flipped: torch.Tensor
    key_length: int
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

    def bias(self, q0: int, q1: int) -> torch.Tensor:
        """The (H, q1 − q0, k1 − k0) bias view of queries [q0, q1) and this call's keys."""
        return offset_view(self.flipped, self.key_length, q0, q1, self.k0, self.k1)


def explicit_attention(call: ExplicitCall) -> None:
    """Explicit softmax over tiles of (example, head, query block), written into ``call.out`` (B, H, L_q, D).

    ``mask`` (additive or boolean, (B, 1, L_q|1, L_k), original key order) is added after the τ division, so
    it is never scaled. A tile is one head's scores for a block of queries (:data:`BLOCK_ELEMENTS`, for
    efficient matmuls); its elementwise passes run chunk by chunk (:data:`CHUNK_ELEMENTS`), so that each
    chunk stays in the core's L2 between passes. With statistics, the softmax is still done in place; the
    sums behind P_max and entropy cost one out-of-place shift and one fused row dot per chunk
    (``stats.softmax_sums_``), and P_max and entropy are formed once per call (docs/design.md §9).
    """
    if torch.is_grad_enabled() and any(t.requires_grad for t in (call.query, call.key_f, call.value_f,
                                                                  call.flipped)):
        _explicit_blocks(call, BLOCK_ELEMENTS)
        return
    if call.query.device.type not in TILED_DEVICES:
        _explicit_blocks(call, DEVICE_BLOCK_ELEMENTS)
        return
    module, query, key_f, value_f, mask, stats, out = (call.module, call.query, call.key_f, call.value_f,
                                                        call.mask, call.stats, call.out)
    b, h, q_len, d = query.shape
    n = call.k1 - call.k0
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
    if mask is not None and query_independent(mask):
        mask_once = to_additive(mask[:, :, :1], query.dtype).flip(-1)  # (B, 1, 1, L_k), reversed keys
    if stats is not None:  # per-row sums of this call; the statistics are formed and handed over at the end
        row_z = torch.empty(b, h, q_len, **f32)  # Σ e
        row_w = torch.empty_like(row_z)  # Σ e·(s − m)
        row_ok = torch.empty(b, q_len, dtype=torch.bool, device=query.device)
    for bi in range(b):
        for q0 in range(0, q_len, rows):
            q1 = min(q0 + rows, q_len)
            r = q1 - q0
            bias = call.bias(q0, q1)  # (H, r, n)
            mblk = None
            if mask is not None:
                mblk = (mask_once[bi] if mask_once is not None else
                        to_additive(mask[bi, :, q0:q1], query.dtype).flip(-1))[0]  # (r|1, n)
            if stats is not None:
                rv, kv = _row_validity(call.row_range, None if mblk is None else mblk[None, None], q0, q1, 1, n,
                                       query.device)
                row_ok[bi, q0:q1] = rv[0]
            qs = query[bi, :, q0:q1] * call.scale  # (H, r, D)
            for hi in range(h):
                z = zbuf[:r] if stats is None else row_z[bi, hi, q0:q1]
                x = torch.mm(qs[hi], key_f[bi, hi].transpose(0, 1), out=buf[: r * n].view(r, n))
                bias_h = bias[hi]
                if want_logits:  # the logits l/τ of the whole tile, before the mask
                    x.add_(bias_h)
                    stats.add_logits(module, x[None, None], rv, kv, tau=call.tau, grid_hint=call.grid_hint)
                    bias_h = None
                e = x if xbuf is None else xbuf[: r * n].view(r, n)  # fp32, becomes exp(s − m)
                _tile_exp_(x, e, bias_h, mblk, chunk, z, None if stats is None else tbuf,
                           None if stats is None else row_w[bi, hi, q0:q1])
                o = out[bi, hi, q0:q1]
                if call.p_drop:
                    p = F.dropout(e / z[:, None], call.p_drop, training=True)
                    torch.mm(p.to(value_f.dtype), value_f[bi, hi], out=o)
                else:
                    torch.mm(e.to(value_f.dtype), value_f[bi, hi], out=o)
                    o.div_(z[:, None].to(o.dtype))
    if stats is not None:
        stats.add_rows(module, *stats_from_sums(row_z, row_w), row_ok)


def _explicit_blocks(call: ExplicitCall, block_elements: int) -> None:
    """The explicit path out of place, over blocks of query rows of all examples and heads (about
    ``block_elements`` scores each): for training (gradients flow to Q, K, V and the bias table) and on
    accelerators (few, large kernels). Statistics (if any): without gradients from the same pass as the softmax
    (``stats.softmax_sums_``, one exp per score), when training from a detached copy of the scores. With an fp32
    bias table and lower-precision inputs (``RelativeBiasTable`` passes one for statistics on a device) the
    scores are computed in fp32. Writes the block outputs into ``out`` (autograd-tracked copies when training).
    """
    module, query, key_f, value_f, mask, stats, out = (call.module, call.query, call.key_f, call.value_f,
                                                        call.mask, call.stats, call.out)
    if call.flipped.dtype == torch.float32 and query.dtype != torch.float32:  # scores in fp32 (t5_bias)
        query, key_f = query.float(), key_f.float()
    b, h, q_len, _ = query.shape
    n = call.k1 - call.k0
    rows = min(q_len, max(MIN_BLOCK_ROWS, block_elements // max(1, b * h * n)))
    independent = mask is not None and query_independent(mask)
    pmaxes, entropies, oks = [], [], []
    for q0 in range(0, q_len, rows):
        q1 = min(q0 + rows, q_len)
        logits = torch.matmul(query[:, :, q0:q1] * call.scale, key_f.transpose(-1, -2))
        logits = logits + call.bias(q0, q1)
        mblk = None
        if mask is not None:
            mrows = mask[:, :, :1] if independent else mask[:, :, q0:q1]
            mblk = to_additive(mrows, logits.dtype).flip(-1)
        x = logits if mblk is None else logits + mblk
        p = None
        if stats is not None:
            rv, kv = _row_validity(call.row_range, mblk, q0, q1, b, n, x.device)
            if stats.wants_logits(module):
                stats.add_logits(module, logits.detach(), rv, kv, tau=call.tau, grid_hint=call.grid_hint)
            if x.requires_grad:  # training: the statistics from a copy, the softmax stays differentiable
                _, _, pmax, entropy = softmax_stats_(x.detach().float().clone())
            else:  # one pass gives the softmax and the sums of both statistics (x is this block's own tensor)
                e, z, weighted = softmax_sums_(x.float())
                pmax, entropy = stats_from_sums(z, weighted)
                p = (e / z[..., None]).to(value_f.dtype)
            pmaxes.append(pmax)
            entropies.append(entropy)
            oks.append(rv)
        if p is None:
            p = torch.softmax(x.float(), -1).to(value_f.dtype)
        p = F.dropout(p, call.p_drop, training=True) if call.p_drop else p
        out[:, :, q0:q1] = torch.matmul(p, value_f)
    if stats is not None:
        stats.add_rows(module, torch.cat(pmaxes, -1), torch.cat(entropies, -1), torch.cat(oks, -1))


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
        return rows_in(row_range, q0, q1, batch, device), None
    return _validity_flipped(mblk, batch, q1 - q0, n, q0)


# ---- masks -------------------------------------------------------------------------------------------


def query_independent(mask: torch.Tensor) -> bool:
    """Whether a (B, 1, L_q, L_k) mask is the same for every query (a padding mask)."""
    if mask.dim() != 4 or mask.shape[1] != 1:
        return False
    if mask.shape[-2] == 1 or mask.stride(-2) == 0:
        return True
    return bool(torch.equal(mask, mask[:, :, :1].expand_as(mask)))  # a materialised padding mask


def key_keep(mask: torch.Tensor | None, batch: int, k_len: int) -> torch.Tensor | None:
    """(B, L_k) boolean keep-vector of a query-independent mask; None without a mask or when rows differ."""
    if mask is None or not query_independent(mask):
        return None
    row = mask[:, 0, 0, :]
    keep = row if row.dtype == torch.bool else row > torch.finfo(row.dtype).min / 2
    return keep.expand(batch, k_len)


def key_ranges(mask: torch.Tensor | None, batch: int, k_len: int) -> list[tuple[int, int]] | None:
    """Each example's valid keys as one range [k0, k1), or None when some example's are not contiguous.

    True for no mask, right padding and left padding; None for masks that vary over queries or have holes.
    """
    if mask is None:
        return [(0, k_len)] * batch
    keep = key_keep(mask, batch, k_len)
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


def to_additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean keep-mask → additive float mask (masked = dtype's minimum); float masks are cast."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~mask, torch.finfo(dtype).min)


def rows_in(rng: tuple[int, int], q0: int, q1: int, batch: int, device: torch.device) -> torch.Tensor:
    """(B, q1 − q0) validity of query rows [q0, q1) whose keys were sliced to ``rng``: a row is valid iff its
    own position lies in the range (a padding token's own row is not)."""
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


def flex_available() -> bool:
    """Whether this torch has FlexAttention."""
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:  # pragma: no cover - torch without FlexAttention
        return False
    return True


def flex_attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, table: torch.Tensor, q_len: int,
                keep: torch.Tensor | None, scaling: float, tau: float) -> torch.Tensor:
    """FlexAttention: score_mod adds T[h, j − i + L_q − 1] and divides by τ; padding is a block mask.

    ``table`` is the offset table T (not flipped; keys in their original order). Untested on CPU
    (FlexAttention needs ``torch.compile`` there, docs/design.md §9); only chosen on CUDA.
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
