"""scripts/bench/gpu/bench_gpu.py's shapes, variants and encoder: the Flan-T5-shaped encoders with random weights, the ways of
computing them (stock SDPA, lengthx's offset table with each backend, with or without statistics), one forward
(docs/gpu.md; paper A §3-4 for what the statistics are)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from bench_attention import CONFIG as T5_BASE
from transformers import T5Config, T5EncoderModel

from lengthx.attention import tiled_softmax
from lengthx.attention.stats import AttentionStats
from lengthx.attention.t5_bias import disable_efficient_t5, enable_efficient_t5
from lengthx.attention.temperature import ATTN_NAME, register
from lengthx.models import get_family

# Flan-T5 (T5 v1.1) encoder shapes; 32 buckets and max distance 128 come from T5_BASE
SHAPES = {
    "large": dict(d_model=1024, num_heads=16, d_kv=64, d_ff=2816, num_layers=24),
    "xl": dict(d_model=2048, num_heads=32, d_kv=64, d_ff=5120, num_layers=24),
    "xxl": dict(d_model=4096, num_heads=64, d_kv=64, d_ff=10240, num_layers=24),
}
SMOKE_SHAPES = {
    "large": dict(d_model=64, num_heads=4, d_kv=16, d_ff=128, num_layers=2),
    "xl": dict(d_model=64, num_heads=8, d_kv=8, d_ff=128, num_layers=2),
    "xxl": dict(d_model=64, num_heads=4, d_kv=16, d_ff=128, num_layers=2),
}
LENGTHS = (2048, 4096, 8192, 15360)
SMOKE_LENGTHS = (128, 256)
L_TR = 512  # Flan-T5's training length: Algorithm 1's reference
WARM_TOKENS = 256  # warm-up length of the slow (launch-bound) tiled-softmax cells
RESERVE_S = 10.0  # kept back from the budget for the last report
# item 2: a path agrees with the bf16 reference when it differs from it by at most TOL_FACTOR times the
# reference's own rounding error (bf16 against fp32, same weights) plus a floor: two bf16 computations of
# the same quantity differ by up to the sum of their errors, and a path's own may exceed the reference's
TOL_FACTOR = 3.0


@dataclass(frozen=True)
class Variant:
    """One way of computing the encoder: stock (``backend`` None) or lengthx's offset table with a backend;
    statistics from every ``stats``-th query row (0 = none)."""

    name: str
    attn: str = ATTN_NAME
    backend: str | None = None
    stats: int = 0
    per_head_tiles: bool = False
    stats_backend: str = "auto"  # attention.stats_backend: "triton" = one Triton pass (docs/gpu.md)
    note: str = ""

    @property
    def flex(self) -> bool:
        return self.backend == "flex"

    @property
    def tiled(self) -> bool:
        """Runs the offset table's tiled explicit softmax (statistics of every row on the offset table)."""
        return self.backend is not None and self.stats == 1 and self.stats_backend != "triton"


STOCK = Variant("stock-sdpa", attn="sdpa", note="transformers SDPA, (1, H, L, L) bias")
DENSE_STATS = Variant("dense+stats", stats=1, note="stock bias, lengthx query-blocked softmax + P_max/entropy")
EXPLICIT = Variant("dense-explicit", stats=1, note="the correctness reference")
OURS_SDPA = Variant("lengthx-sdpa", backend="sdpa", note="offset table, SDPA over the zero-copy view")
OURS_FLEX = Variant("lengthx-flex", backend="flex", note="offset table, FlexAttention (on request)")
OURS_STATS = Variant("lengthx+stats", backend="sdpa", stats=1,
                     note="offset table + P_max/entropy, the default (attention.stats_backend=auto: on CUDA the "
                          "Triton pass when it passes its self-check, else the explicit blocks)")
OURS_BLOCKS = Variant("lengthx+stats[blocks]", backend="sdpa", stats=1, stats_backend="blocks",
                      note="offset table, explicit softmax blocks + P_max/entropy (attention.stats_backend=blocks)")
OURS_STATS_TILES = Variant("lengthx+stats[per-head tiles]", backend="sdpa", stats=1, per_head_tiles=True,
                           note="the same with the CPU's per-head tiles forced on any device")
OURS_TRITON = Variant("lengthx+triton", backend="sdpa", stats=1, stats_backend="triton",
                      note="offset table, output + P_max/entropy of every row in one Triton pass")
FLEX_SAMPLED = Variant("lengthx-flex+stats/16", backend="flex", stats=16,
                       note="FlexAttention + statistics of every 16th row")
ITEM1_CORE = (OURS_FLEX, OURS_SDPA, STOCK)  # per length: lengthx first, stock (the likeliest OOM) last
ITEM1_EXTRA = (FLEX_SAMPLED, OURS_STATS_TILES, DENSE_STATS)
ITEM1_STATS = (OURS_STATS, OURS_TRITON, OURS_BLOCKS)  # statistics of every row: the default, then each path by name
ITEM1_ORDER = (STOCK, OURS_SDPA, OURS_FLEX, DENSE_STATS, OURS_STATS, OURS_TRITON, OURS_BLOCKS, OURS_STATS_TILES,
               FLEX_SAMPLED)


@contextmanager
def per_head_tiles(enabled: bool) -> Iterator[None]:
    """The explicit softmax over ``lengthx.attention.tiled_softmax``'s per-head tiles on every device (restored
    afterwards): the CPU's layout, launch-bound on a GPU."""
    if not enabled:
        yield
        return
    old = tiled_softmax.TILED_DEVICES
    tiled_softmax.TILED_DEVICES = ("cpu", "cuda")
    try:
        yield
    finally:
        tiled_softmax.TILED_DEVICES = old


def t5_encoder(shape: dict[str, int], device: torch.device, dtype: torch.dtype, seed: int = 0) -> T5EncoderModel:
    """A Flan-T5-shaped encoder (gated-GELU) with random weights, built on ``device`` in ``dtype``, eval mode;
    block 0's relative bias drawn from N(0, 2) so that positions matter, as in a trained T5."""
    register()
    torch.manual_seed(seed)
    cfg = T5Config(**{**T5_BASE, "feed_forward_proj": "gated-gelu", **shape})
    with torch.device(device):
        model = T5EncoderModel._from_config(cfg, dtype=dtype)
    model = model.to(device).eval()
    with torch.no_grad():
        model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.normal_(0, 2.0)
    return model


def encoder_modules(model: T5EncoderModel) -> list[torch.nn.Module]:
    return get_family("t5").temperature_modules(model, "encoder")


def configure(model: T5EncoderModel, v: Variant) -> None:
    """Switch ``model`` to variant ``v`` in place (stock bias and attention, or the offset table)."""
    if v.backend is None:
        disable_efficient_t5(model)
        model.set_attn_implementation(v.attn)
    else:
        enable_efficient_t5(model, mode="always", backend=v.backend, stats_backend=v.stats_backend)


def encode(model: T5EncoderModel, ids: torch.Tensor, v: Variant) -> tuple[torch.Tensor, AttentionStats | None]:
    """One encoder forward of variant ``v`` (configured): the last hidden state and the statistics, if any."""
    stats = AttentionStats(encoder_modules(model), row_stride=v.stats) if v.stats else None
    with torch.inference_mode(), stats if stats is not None else nullcontext(), per_head_tiles(v.per_head_tiles):
        out = model(input_ids=ids).last_hidden_state
    return out, stats


def random_ids(length: int, vocab: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, vocab, (1, length), generator=torch.Generator().manual_seed(seed)).to(device)


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))
