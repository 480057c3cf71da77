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

Paths of :meth:`RelativeBiasTable.attend` (all compute softmax((QKᵀ·scaling + bias)/τ + mask) with the mask
*not* scaled, docs/design.md §5; the kernels are in :mod:`lengthx.attention.tiled_softmax`):

* ``sdpa`` (the default on every device, no statistics): one SDPA call over the view per group of examples that share
  their valid key range. Right- or left-padding makes each example's valid keys one contiguous range, so
  padding is handled by slicing keys (and the bias view's columns), not by a mask; τ is folded into
  SDPA's ``scale`` and into the table (T/τ), so it costs nothing.
* ``explicit`` (statistics, or masks that are not one contiguous key range per example): with P_max and
  entropy only, on CPU in fp32 without gradients, the fused kernel (:mod:`lengthx.attention.fused`: one
  flash-style pass that keeps the statistics' sums per row); otherwise the tiled explicit softmax, which also
  reads P_max, entropy and the layer-0 logit vector from its tiles.
* ``flex`` (only when asked for): FlexAttention with the table indexed in ``score_mod``. On an H200 it was no
  faster than stock SDPA at the XXL shape, while ``sdpa`` over the view took 0.12-0.33x stock's time
  (``results/bench/gpu-stats.md``); head dimensions below 16 are refused (the kernel's minimum).

Statistics on a GPU (``attention.stats_backend``, :mod:`lengthx.attention.stats_backend`): ``auto`` computes
output, P_max and entropy on CUDA in one flash-style pass over the table (:mod:`lengthx.attention.triton_stats`,
any float dtype, padding masks) when the ``triton`` package imports and the kernel passes its self-check, else
the explicit device blocks with one warning; ``triton`` asks for the pass (CUDA only, or the CPU under
``TRITON_INTERPRET=1``), ``blocks`` for the explicit path. On the CPU ``auto`` takes the paths above.

Hook (transformers 5.23): :func:`enable_efficient_t5` patches ``compute_bias`` of encoder block 0 only, so
it returns a :class:`RelativeBiasTable` instead of the (1, H, L, L) tensor; that object travels through
T5's ``position_bias`` argument to every encoder layer, and the one registered attention function
(``lengthx.attention.temperature.temperature_attention``, name "lengthx") hands such calls to
:meth:`RelativeBiasTable.attend`. The decoder's biases stay tensors, so decoder attention keeps the stock
path.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from lengthx.attention import fused, tiled_softmax
from lengthx.attention.stats import stats_from_sums
from lengthx.attention.stats_backend import STATS_BACKENDS, use_triton
from lengthx.attention.temperature import ATTN_NAME, AttentionCall, register
from lengthx.attention.tiled_softmax import (
    ExplicitCall,
    explicit_attention,
    flex_attend,
    key_keep,
    key_ranges,
    offset_view,
    rows_in,
)

MODES = ("auto", "always", "never")
FLEX_MIN_HEAD_DIM = 16  # FlexAttention's compiled kernel refuses smaller query/key/value head dimensions
BACKENDS = ("auto", "sdpa", "explicit", "flex")
DEFAULT_MIN_LENGTH = 2048  # mode "auto": inputs longer than this use the efficient path
SETTINGS_ATTR = "lengthx_efficient"  # on encoder block 0's attention module: an EfficientT5Settings


def resolve_backend(backend: str, head_dim: int, with_stats: bool) -> str:
    """The path one encoder attention call takes: ``explicit`` whenever statistics are captured (the explicit
    tiles, or the fused kernel of :mod:`lengthx.attention.fused` where it applies, read P_max and entropy);
    ``auto`` is SDPA over the bias view on every device (on an H200, XXL shape, bf16, it ran
    6-8x faster than FlexAttention from 2k to 15k tokens: ``results/bench/gpu-stats.md``); ``flex`` only when
    asked for, and refused below FlexAttention's smallest head dimension."""
    if with_stats:
        return "explicit"
    if backend == "flex" and head_dim < FLEX_MIN_HEAD_DIM:
        raise ValueError(f"attention.backend=flex needs a head dimension of at least {FLEX_MIN_HEAD_DIM} "
                         f"(FlexAttention's kernel), this model's is {head_dim}: use attention.backend=sdpa")
    return "sdpa" if backend == "auto" else backend


@dataclass(frozen=True)
class EfficientT5Settings:
    """How the encoder attention of one model is computed (config key ``attention.efficient``).

    ``mode``: ``auto`` = efficient for inputs longer than ``min_length`` tokens, stock below; ``always``;
    ``never``. ``backend``: ``auto`` (SDPA over the view, :func:`resolve_backend`), ``sdpa``, ``explicit``,
    ``flex``. With statistics capture on, the explicit path is used whatever the backend, unless the Triton
    kernel of :mod:`lengthx.attention.triton_stats` computes output and statistics in one pass (config
    ``attention.stats_backend``: ``auto`` on CUDA when it passes its self-check, ``triton``; ``blocks`` never).
    """

    mode: str = "auto"
    min_length: int = DEFAULT_MIN_LENGTH
    backend: str = "auto"
    stats_backend: str = "auto"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown attention.efficient mode {self.mode!r}; "
                             f"valid modes: {', '.join(MODES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown efficient attention backend {self.backend!r}; "
                             f"valid backends: {', '.join(BACKENDS)}")
        if self.stats_backend not in STATS_BACKENDS:
            raise ValueError(f"unknown attention.stats_backend {self.stats_backend!r}; "
                             f"valid: {', '.join(STATS_BACKENDS)}")

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

    Takes the arguments of T5's ``compute_bias`` (the patched one hands them over unchanged). Each offset is bucketed once with T5's own bucket function and looked up once in block 0's embedding,
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

    def __init__(self, table: torch.Tensor, query_length: int, key_length: int, backend: str = "auto",
                 stats_backend: str = "auto"):
        if table.shape[-1] != query_length + key_length - 1:
            raise ValueError(f"offset table of width {table.shape[-1]} does not fit "
                             f"{query_length}x{key_length}")
        self.table = table
        self.query_length = query_length
        self.key_length = key_length
        self.backend = backend
        self.stats_backend = stats_backend
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
        """Zero-copy (H, q1 − q0, k1 − k0) bias of queries [q0, q1) and the *reversed* keys k1 − 1, …, k0
        (:func:`~lengthx.attention.tiled_softmax.offset_view`)."""
        return offset_view(flipped, self.key_length, q0, q1, k0, k1)

    # ---- attention ---------------------------------------------------------------------------------------

    def fuses_statistics(self, call: AttentionCall) -> bool:
        """Whether this call's P_max and entropy come from one pass with its output
        (:meth:`statistics_kernel`); then every ``row_stride``-th row is read from that pass."""
        return self.statistics_kernel(call) is not None

    def statistics_kernel(self, call: AttentionCall) -> str | None:
        """The one-pass kernel that computes this call's statistics, or None (the explicit path).

        ``triton`` (``attention.stats_backend=triton``, or ``auto`` on CUDA when the kernel passed its
        self-check: :func:`~lengthx.attention.stats_backend.use_triton`): statistics without the logit capture,
        no dropout, no gradients, self-attention with no mask or a padding mask, on CUDA (asked for by name
        elsewhere: a ValueError naming the fix); calls outside these take the explicit path. ``fused``
        (:mod:`lengthx.attention.fused`): the same on the CPU in fp32 with keys that form
        one contiguous range per example."""
        stats, query = call.stats, call.query
        if stats is None or stats.wants_logits(call.module):
            return None
        p_drop = call.dropout if call.module.training else 0.0
        b, k_len = query.shape[0], call.key.shape[-2]
        if self.stats_backend == "triton" or (self.stats_backend == "auto" and query.device.type == "cuda"):
            if p_drop or (torch.is_grad_enabled() and query.requires_grad) or query.shape[-2] != k_len:
                return None
            if not use_triton(self.stats_backend, query.device):
                return None  # auto, and the kernel is not usable here (warned once): the device blocks
            if not triton_kernel().supported(query.device):
                raise ValueError(f"attention.stats_backend=triton runs on CUDA only, this model is on "
                                 f"{query.device.type}: use attention.stats_backend=auto, or device=cuda")
            padding = call.attention_mask is None or key_keep(call.attention_mask, b, k_len) is not None
            return "triton" if padding else None
        if not fused.applies(query, p_drop):
            return None
        return "fused" if key_ranges(call.attention_mask, b, k_len) is not None else None

    def attend(self, call: AttentionCall) -> torch.Tensor:
        """softmax((QKᵀ·scaling + bias)/τ + mask)·V of a call with (B, H, L_q, D) inputs; returns (B, L_q, H, D)."""
        module, query, key, value, tau = call.module, call.query, call.key, call.value, call.tau
        if tau <= 0:
            raise ValueError(f"temperature must be positive, got τ={tau} on {type(module).__name__}")
        b, h, q_len, d = query.shape
        k_len = key.shape[-2]
        if (q_len, k_len) != (self.query_length, self.key_length) or key.shape[1] != h:
            raise ValueError(f"relative bias table for {self.query_length}x{self.key_length} used on "
                             f"{q_len}x{k_len} attention")
        base_scale = d ** -0.5 if call.scaling is None else call.scaling
        scale = base_scale / tau
        p_drop = call.dropout if module.training else 0.0
        mask = call.attention_mask
        kernel = self.statistics_kernel(call)
        if kernel == "triton":
            return self._triton(call, scale)
        backend = "fused" if kernel == "fused" else resolve_backend(self.backend, d, call.stats is not None)
        if backend == "flex" and p_drop == 0.0:
            keep = key_keep(mask, b, k_len)
            if keep is not None or mask is None:
                # the module's own scale, not scale·τ (1/0.95·0.95 != 1.0 would recompile the kernel)
                out = flex_attend(query, key, value, self.table, q_len, keep, base_scale, tau)
                return out.transpose(1, 2).contiguous()
            backend = "explicit"
        return self._blockwise(call, backend, scale, p_drop)

    def _triton(self, call: AttentionCall, scale: float) -> torch.Tensor:
        """Output (B, L_q, H, D) and statistics of every ``row_stride``-th row from one Triton pass over the
        table (:mod:`lengthx.attention.triton_stats`); a row counts when its own position is a kept key."""
        query, stats = call.query, call.stats
        b, _, q_len, _ = query.shape
        keep = key_keep(call.attention_mask, b, q_len)
        step = stats.row_stride
        out, z, w = triton_kernel().attention_stats(query, call.key, call.value, self.table, scale, 1.0 / call.tau,
                                                    keep, step)
        ok = (torch.ones(b, q_len, dtype=torch.bool, device=query.device) if keep is None
              else keep.to(query.device))
        stats.add_rows(call.module, *stats_from_sums(z, w), ok[:, ::step])
        return out

    def _blockwise(self, call: AttentionCall, backend: str, scale: float, p_drop: float) -> torch.Tensor:
        """The ``sdpa``, ``fused`` and ``explicit`` paths: keys and values reversed, the bias a view of the
        flipped table."""
        module, query, value, mask, tau, stats = (call.module, call.query, call.value, call.attention_mask,
                                                  call.tau, call.stats)
        b, h, q_len, _ = query.shape
        k_len = call.key.shape[-2]
        # the device blocks' statistics from fp32 scores whatever the input dtype: q·k, T/τ and their sum are
        # not rounded to bf16 before the softmax (docs/gpu.md: bf16 logits put the entropy outside tolerance)
        wide = (stats is not None and backend == "explicit" and query.device.type not in tiled_softmax.TILED_DEVICES
                and not (torch.is_grad_enabled() and query.requires_grad))
        flipped = self.flipped(tau, torch.float32 if wide else query.dtype, query.device)
        ranges = key_ranges(mask, b, k_len)
        key_f = call.key.flip(2).contiguous()
        value_f = value.flip(2).contiguous()
        out = torch.empty(b, h, q_len, value.shape[-1], dtype=query.dtype, device=query.device)
        if ranges is None:  # a mask that is not one contiguous key range per example: explicit, masked
            keep = key_keep(mask, b, k_len)
            longest = int(keep.sum(-1).max()) if keep is not None else k_len  # logit-vector grid
            explicit_attention(ExplicitCall(module, query, key_f, value_f, flipped, k_len, 0, k_len, mask, scale,
                                            tau, p_drop, stats, out, grid_hint=longest))
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
            elif backend == "fused":
                o_g, z, w = fused.fused_attention(q_g, k_g, v_g, flipped, k_len - k1, scale)
                pmax, entropy = stats_from_sums(z, w)
                ok = rows_in((k0, k1), 0, q_len, q_g.shape[0], query.device)
                step = stats.row_stride  # the rows sampled_statistics reads, from the same pass
                stats.add_rows(module, pmax[..., ::step], entropy[..., ::step], ok[:, ::step])
            else:
                o_g = query.new_empty(q_g.shape[0], h, q_len, v_g.shape[-1])
                explicit_attention(ExplicitCall(module, q_g, k_g, v_g, flipped, k_len, k0, k1, None, scale, tau,
                                                p_drop, stats, o_g, row_range=(k0, k1),
                                                grid_hint=max(e - s for s, e in ranges)))
            if isinstance(sel, slice):
                out[sel] = o_g
            else:
                out.index_copy_(0, sel, o_g)
        return out.transpose(1, 2).contiguous()


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
    self: torch.nn.Module, query_length: int, key_length: int, *args: Any, **kwargs: Any
) -> torch.Tensor | RelativeBiasTable:
    """Patched ``compute_bias`` of encoder block 0: the offset table for long inputs, stock otherwise.

    The rest of T5's call (``device``, ``past_seen_tokens``) goes unchanged to whichever of the two answers:
    stock ``compute_bias`` or :func:`relative_bias_table`, which takes the same arguments.
    """
    settings: EfficientT5Settings | None = getattr(self, SETTINGS_ATTR, None)
    if (
        settings is None
        or not settings.applies(max(int(query_length), int(key_length)))
        or self.config._attn_implementation != ATTN_NAME  # only our attention function understands the table
    ):
        return type(self).compute_bias(self, query_length, key_length, *args, **kwargs)
    table = relative_bias_table(self, int(query_length), int(key_length), *args, **kwargs)
    return RelativeBiasTable(table, int(query_length), int(key_length), backend=settings.backend,
                             stats_backend=settings.stats_backend)


def triton_kernel() -> types.ModuleType:
    """:mod:`lengthx.attention.triton_stats`, imported on first use; a ValueError naming the fix without triton."""
    try:
        from lengthx.attention import triton_stats
    except ImportError as exc:
        raise ValueError(f"attention.stats_backend=triton needs the triton package ({exc}): pip install "
                         "'lengthx[gpu]' on a CUDA machine, or use attention.stats_backend=auto") from None
    return triton_stats


def enable_efficient_t5(
    model: torch.nn.Module,
    mode: str = "auto",
    min_length: int = DEFAULT_MIN_LENGTH,
    backend: str = "auto",
    stats_backend: str = "auto",
) -> None:
    """Compute ``model``'s T5 encoder self-attention from the offset table (config ``attention.efficient``).

    ``mode``: ``auto`` (inputs longer than ``min_length`` tokens; stock below, so short inputs are
    unchanged), ``always``, or ``never`` (same as :func:`disable_efficient_t5`). Switches the model to the
    "lengthx" attention implementation (τ = 1 and no statistics there is stock SDPA), and patches encoder
    block 0's ``compute_bias`` only; the decoder is untouched. Idempotent; calling again changes settings.
    ``stats_backend``: ``auto``, ``triton`` (statistics from :mod:`lengthx.attention.triton_stats`; the
    triton package must import, else a ValueError naming the fix) or ``blocks``
    (:mod:`lengthx.attention.stats_backend`).
    """
    settings = EfficientT5Settings(mode=mode, min_length=int(min_length), backend=backend,
                                   stats_backend=stats_backend)
    if stats_backend == "triton" and mode != "never":
        triton_kernel()
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
