"""P_max and entropy at inference speed on a GPU: T5 encoder attention over the offset table as one Triton
flash-attention pass that keeps the statistics' sums (paper A Algorithm 1's FindS, §4; docs/design.md §9).

The CPU's fused kernel (:mod:`lengthx.attention.fused`) is CPU-only and fp32; on a GPU the explicit path writes
every block of scores out and runs the softmax over it (``tiled_softmax._explicit_blocks``). This kernel is the
GPU's counterpart of the CPU one: per (example, head, block of query rows) the keys come in blocks, the scores
of a block are one ``tl.dot`` accumulated in fp32 plus the bias of each (query, key) pair read from the offset
table T (bias of query i and key j at T[h, j − i + L_q − 1], ``t5_bias.relative_bias_table``: 2L − 1 entries
per head, which stay in the cache), and an online softmax keeps per row the running maximum m and the sums
Z = Σ e^{s−m} and W = Σ e^{s−m}·(s − m). When m rises to m′, Z′ = αZ and W′ = α(W + (m − m′)Z) with
α = e^{m−m′}, and the output accumulator is rescaled by α. Then P_max = 1/Z and H = log Z − W/Z
(:func:`lengthx.attention.stats.stats_from_sums`). Inside the kernel the scores are in base 2 (exp2 is the
GPU's exponential), and a tile whose offsets all lie in one run of equal table entries (:func:`run_ends`; T5's
buckets make most tiles so at long lengths) adds that one entry instead of gathering one per score.

Scores are s = (q·k·scaling + T)/τ, computed as (q·k)·(scaling/τ) + T·(1/τ) with q·k, the bias and every
sum in fp32 whatever the input dtype (bf16 and fp16 inputs are only rounded where they are stored: the
probabilities fed to the value product and the output, as in any flash kernel). Masked keys (a padding mask:
one keep flag per key, the same for every query) get a score of :data:`MASKED` so that they add exactly 0 to Z,
W and the output; each example's loop over keys also starts at its first kept key and stops after its last
(right or left padding costs no key blocks). Statistics are written for every ``row_stride``-th query row (rows 0,
S, 2S, …, those ``AttentionStats.row_stride`` reads), the output for every row.

Forward only, no dropout. Under ``TRITON_INTERPRET=1`` (set before this module is imported) the same kernel
runs on CPU tensors in triton's interpreter at fixed small blocks (tests/test_triton_stats.py); the interpreter
multiplies bfloat16 ``tl.dot`` operands as raw bits (triton-lang/triton#11584), so there bf16 operands are
widened to fp32 before each product after the same roundings the GPU does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# The score of a masked key: finite, so that a block with no kept key yet (m = MASKED) gives no NaN; once a
# kept key raises m, α = e^{MASKED − m} = 0 wipes what such a block added, and e^{MASKED − m} = 0 adds nothing.
MASKED = tl.constexpr(-1.0e30)
LOG2E = 1.4426950408889634  # scores are kept in base 2 inside the kernel (exp2 is the GPU's native exponential)
LN2 = tl.constexpr(0.6931471805599453)
INTERPRET_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 16}  # the interpreter: several blocks of rows and keys at small shapes
# Candidates for the autotuner on a GPU (flash-attention forward at head dimensions 64-128 on Hopper/Ampere);
# the choice is cached per length bucket (next power of two of L_k), head dimension, statistics and mask.
CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)
           for bm, bn, warps, stages in ((128, 64, 4, 3), (128, 64, 8, 3), (128, 32, 4, 3), (64, 64, 4, 3),
                                         (128, 128, 8, 2), (64, 32, 4, 4))]


@triton.jit
def _attention_stats_kernel(
    Q, K, V, T, RUN_END, KEEP, LO, HI, OUT, Z, W,
    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om, stride_th, stride_keep,
    H, LQ, WIDTH, N_STATS, ROW_STRIDE, scale2, inv_tau2, L_BUCKET,
    D: tl.constexpr, HAS_KEEP: tl.constexpr, STATS: tl.constexpr, RUNS: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One (block of query rows, example × head): the output rows and, with STATS, Z and W of the rows
    i ≡ 0 (mod ROW_STRIDE), at Z/W[bh, i // ROW_STRIDE]. Scores are kept in base 2 (s·log₂e: ``scale2``,
    ``inv_tau2``), so e = 2^{t} with t = (s − m)·log₂e and W = ln 2 · Σ e·t. L_BUCKET only keys the
    autotuner's cache."""
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    row0 = tl.program_id(0) * BLOCK_M
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < LQ
    d_ok = offs_d < D
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    t_head = T + h * stride_th
    t_rows = t_head + (LQ - 1 - offs_m)  # + j: the bias of (row i, key j)
    m_i = tl.full([BLOCK_M], MASKED, tl.float32)
    z_i = tl.zeros([BLOCK_M], tl.float32)
    w_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    lo = tl.load(LO + b)
    hi = tl.load(HI + b)
    for start_n in range((lo // BLOCK_N) * BLOCK_N, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        key_ok = (offs_n >= lo) & (offs_n < hi)
        if HAS_KEEP:
            key_ok = key_ok & (tl.load(KEEP + b * stride_keep + offs_n, mask=key_ok, other=0) != 0)
        k = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None], mask=key_ok[None, :] & d_ok[:, None],
                    other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        s = tl.dot(q, k, input_precision=PRECISION) * scale2
        if RUNS:  # the tile's offsets [first, last] in one run of equal table entries: one bias for the tile
            first = tl.maximum(start_n - row0 - BLOCK_M + LQ, 0)
            last = tl.minimum(start_n + BLOCK_N - row0 + LQ - 2, WIDTH - 1)
            if tl.load(RUN_END + first) >= last:
                bias = tl.zeros([BLOCK_M, BLOCK_N], tl.float32) + tl.load(t_head + first).to(tl.float32)
            else:
                bias = tl.load(t_rows[:, None] + offs_n[None, :], mask=row_ok[:, None] & key_ok[None, :],
                               other=0.0).to(tl.float32)
        else:
            bias = tl.load(t_rows[:, None] + offs_n[None, :], mask=row_ok[:, None] & key_ok[None, :],
                           other=0.0).to(tl.float32)
        s = tl.where(key_ok[None, :], s + bias * inv_tau2, MASKED)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        t = s - m_new[:, None]
        e = tl.exp2(t)
        if STATS:
            w_i = alpha * (w_i + (m_i - m_new) * z_i) + tl.sum(e * t, 1)
        z_i = alpha * z_i + tl.sum(e, 1)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :], mask=key_ok[:, None] & d_ok[None, :],
                    other=0.0)
        p = e.to(V.dtype.element_ty)  # rounded to the value dtype for the product, as the GPU's dot takes it
        if UPCAST:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
        m_i = m_new
    z_i = tl.where(z_i > 0, z_i, 1.0)  # an example without kept keys: 0 output, not NaN (its rows are invalid)
    out = acc / z_i[:, None]
    tl.store(OUT + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :],
             out.to(OUT.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    if STATS:
        sel = row_ok & (offs_m % ROW_STRIDE == 0)
        idx = bh.to(tl.int64) * N_STATS + offs_m // ROW_STRIDE
        tl.store(Z + idx, z_i, mask=sel)
        tl.store(W + idx, w_i * LN2, mask=sel)


INTERPRETED = type(_attention_stats_kernel).__name__ == "InterpretedFunction"  # TRITON_INTERPRET=1 at import
# RUNS is not in the key: the one-bias tiles and the gathering pass then run at the same blocks, so that their
# results differ by fp32 rounding at most (tests/test_triton_stats.py; the interpreter gives the same bits)
_TUNED = None if INTERPRETED else triton.autotune(
    CONFIGS, key=["L_BUCKET", "BLOCK_D", "STATS", "HAS_KEEP"])(_attention_stats_kernel)


def supported(device: torch.device) -> bool:
    """Whether the kernel runs on tensors of ``device``: CUDA, or the CPU under ``TRITON_INTERPRET=1``."""
    return device.type == "cuda" or (INTERPRETED and device.type == "cpu")


def best_config() -> str | None:
    """The autotuner's choice of the last call (blocks, warps, stages) as text; None before one or when
    interpreting."""
    config = getattr(_TUNED, "best_config", None)
    return None if config is None else str(config)


def key_bounds(keep: torch.Tensor | None, batch: int, k_len: int, device: torch.device
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(first kept key, last kept key + 1) per example as int32 (B,), computed on the device (no sync); all
    keys without a mask, (0, 0) for an example with none kept."""
    if keep is None:
        return (torch.zeros(batch, dtype=torch.int32, device=device),
                torch.full((batch,), k_len, dtype=torch.int32, device=device))
    idx = torch.arange(k_len, device=device, dtype=torch.int32)
    lo = torch.where(keep, idx, k_len).amin(1)
    hi = torch.where(keep, idx + 1, 0).amax(1)
    return torch.minimum(lo, hi).to(torch.int32), hi.to(torch.int32)


def run_ends(table: torch.Tensor) -> torch.Tensor:
    """For each offset index x of the (H, W) table, the last index y ≥ x such that T[:, x..y] are equal in every
    head (int32, W). T5's buckets make long runs: every offset beyond ``relative_attention_max_distance`` on
    one side shares one bucket, so at long lengths most tiles of scores have a single bias per head."""
    width = table.shape[1]
    idx = torch.arange(width, device=table.device, dtype=torch.int32)
    same = (table[:, 1:] == table[:, :-1]).all(0)
    ends = torch.where(torch.cat([~same, same.new_ones(1)]), idx, width - 1)  # x where the run through x ends
    return ends.flip(0).cummin(0).values.flip(0).to(torch.int32)


def attention_stats(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    table: torch.Tensor,
    scale: float,
    inv_tau: float,
    keep: torch.Tensor | None = None,
    row_stride: int = 1,
    stats: bool = True,
    runs: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """softmax(q·k·``scale`` + T·``inv_tau`` over the kept keys)·V in one pass, with Z and W of every
    ``row_stride``-th row.

    ``query`` (B, H, L_q, D), ``key`` and ``value`` (B, H, L_k, D) in the original key order (any strides with
    a unit last one); ``table`` (H, L_q + L_k − 1): T[h, j − i + L_q − 1] is the bias of query i and key j;
    ``keep`` (B, L_k) bool or None: the keys every query of an example attends to. For T5 at temperature τ,
    ``scale`` = scaling/τ and ``inv_tau`` = 1/τ (docs/design.md §5). Returns ``(out (B, L_q, H, D), z, w)``,
    the output in the layout transformers' attention functions return and in the inputs' dtype; z and w
    (B, H, ⌈L_q/row_stride⌉) fp32 are the sums of rows 0, S, 2S, … (None without ``stats``). ``runs``: a
    tile of scores whose offsets lie in one run of equal table entries (:func:`run_ends`) adds one bias instead
    of gathering one per score (the same numbers; off only to measure what it saves).
    """
    if not supported(query.device):
        raise ValueError(f"the Triton statistics kernel runs on CUDA tensors (or on the CPU under TRITON_INTERPRET=1),"
                         f" got {query.device.type}")
    b, h, q_len, d = query.shape
    k_len = key.shape[2]
    if key.shape != (b, h, k_len, d) or value.shape != key.shape:
        raise ValueError(f"query {tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)} must "
                         "be (B, H, L, D) with the same B, H and D, and key and value the same L")
    if table.shape != (h, q_len + k_len - 1):
        raise ValueError(f"offset table {tuple(table.shape)} does not fit {h} heads of {q_len}x{k_len} attention")
    if row_stride < 1:
        raise ValueError(f"row_stride must be >= 1, got {row_stride}")
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    table = table.to(query.device).contiguous()
    lo, hi = key_bounds(keep, b, k_len, query.device)
    keep_arg = lo if keep is None else keep.to(device=query.device, dtype=torch.int8).contiguous()
    out = query.new_empty(b, q_len, h, d)
    n_stats = triton.cdiv(q_len, row_stride)
    f32 = {"dtype": torch.float32, "device": query.device}
    z = torch.empty(b, h, n_stats if stats else 1, **f32)
    w = torch.empty_like(z)
    block_d = max(16, triton.next_power_of_2(d))  # tl.dot takes dimensions of 16 or more
    ends = run_ends(table) if runs else lo
    args = (query, key, value, table, ends, keep_arg, lo, hi, out, z, w,
            query.stride(0), query.stride(1), query.stride(2), key.stride(0), key.stride(1), key.stride(2),
            value.stride(0), value.stride(1), value.stride(2), out.stride(0), out.stride(2), out.stride(1),
            table.stride(0), keep_arg.stride(0),
            h, q_len, table.shape[1], n_stats, int(row_stride), float(scale) * LOG2E, float(inv_tau) * LOG2E,
            triton.next_power_of_2(k_len))
    meta = {"D": d, "HAS_KEEP": keep is not None, "STATS": bool(stats), "RUNS": bool(runs), "BLOCK_D": block_d,
            "UPCAST": INTERPRETED and query.dtype == torch.bfloat16,
            "PRECISION": "ieee" if query.dtype == torch.float32 else "tf32"}  # fp32: no TF32 rounding of q, k

    def grid(m: dict) -> tuple[int, int]:
        return triton.cdiv(q_len, m["BLOCK_M"]), b * h

    if INTERPRETED:
        _attention_stats_kernel[grid](*args, **meta, **INTERPRET_BLOCKS)
    else:
        with torch.cuda.device(query.device):
            _TUNED[grid](*args, **meta)
    return (out, z, w) if stats else (out, None, None)
