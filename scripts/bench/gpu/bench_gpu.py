"""GPU benchmark of both papers' hot paths at the papers' model shapes, in one run (docs/design.md §9).

Every figure of ``make bench`` comes from a small CPU; this script measures what the paper profile needs on
one GPU, with random weights at the real shapes (T5EncoderModel / GPT-2 built from configs, no hub):

1. **Paper A, Flan-T5-XXL-shaped encoder** (d_model 4096, 64 heads × d_kv 64, d_ff 10240 gated-GELU, 24
   layers, 32 buckets, max distance 128) in bf16, batch 1, at 2k, 4k, 8k and 15k tokens: stock transformers
   SDPA; lengthx's offset-table path (``lengthx.attention.t5_bias``) with the ``sdpa`` backend (the bias a
   zero-copy view) and the ``flex`` backend (FlexAttention, the CUDA default); with statistics capture
   (P_max and entropy of every query row, Algorithm 1's FindS): the dense stock bias with lengthx's
   query-blocked softmax, and the offset-table explicit softmax (what every backend runs with statistics on:
   on a GPU over blocks of query rows of all heads, ``tiled_softmax.DEVICE_BLOCK_ELEMENTS``), the latter also
   with the CPU's per-head tiles forced (``tiled_softmax.TILED_DEVICES``, what the GPU ran before the blocks),
   and Flex with statistics from every 16th query row only
   (``calibration.row_stride``). Peak memory is ``torch.cuda.max_memory_allocated`` over the timed forwards
   (and its increment over the weights), time is CUDA events, warm-up excluded, median of up to 5; both as
   ratios to stock SDPA where stock fits. The growth of the increment with L is fitted: GiB per 1k tokens,
   the log-log slope, and the ratio of the marginal cost per token of the last two intervals (1 = linear).
2. **Correctness on the device**: at 2k tokens on Flan-T5-Large- and -XL-shaped encoders, τ = 1 and 0.7, the
   encoder output and the per-(layer, head) P_max / entropy of each path against the explicit softmax over
   the dense bias in bf16 (lengthx's path below ``attention.efficient.min_length``). Tolerance: three times
   that reference's own bf16 error against the same computation in fp32, plus a small floor.
3. **Algorithm 1** (paper A §4) at the XL shape: one calibration from an L_tr = 512 reference to 15k
   tokens (1 example each) by grid and by bisection (``lengthx.alignment.algorithm1.calibrate``) with
   statistics from every 16th row, measured; with every row (the paper profile), one FindS pass is measured
   and the searches are projected from it.
4. **Paper B** (§3) at GPT-2 small's shape (L_t = 1024): training tokens/s and peak memory of ``full`` at
   4·L_t against ``chunk-0.25`` and plain ``da`` at L_t, same tokens per step, bf16 autocast as the training
   loop on a GPU (``scripts/bench/bench_training_memory.py``'s builder, batches and step).

The run keeps to ``--budget-s`` of wall time: cells run most important first, a cell whose predicted time
does not fit is reported "skipped: budget", and slow cells are stopped at the budget. Each cell is guarded:
an out-of-memory or any error is recorded in its row (one line) and the run goes on. The report is
rewritten after every cell (``results/bench/gpu.md``, raw numbers in ``gpu.json`` beside it).

    python scripts/bench/gpu/bench_gpu.py                 # on a GPU -> results/bench/gpu.md (make bench-gpu)
    python scripts/bench/gpu/bench_gpu.py --smoke         # tiny shapes, any device -> results/bench/gpu_smoke.md

The code is split by item: shapes, variants and the encoder (``bench_gpu_models``), the run's bookkeeping
(``bench_gpu_core``), items 1-4 (``bench_gpu_encoder``, ``bench_gpu_correctness``, ``bench_gpu_algorithm1``,
``bench_gpu_paper_b``) and the report (``bench_gpu_report``); this file assembles and runs them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

T_START = time.monotonic()  # the budget counts from here: torch and transformers take seconds to import
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[3]
for entry in (ROOT, ROOT / "scripts" / "bench", ROOT / "scripts" / "bench" / "gpu"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

import torch  # noqa: E402
from bench_gpu_algorithm1 import Algorithm1Timing  # noqa: E402
from bench_gpu_core import BenchCore  # noqa: E402
from bench_gpu_correctness import Correctness  # noqa: E402
from bench_gpu_encoder import EncoderTiming  # noqa: E402
from bench_gpu_models import (  # noqa: E402 - the names other scripts imported from here before the split
    ITEM1_CORE,
    ITEM1_EXTRA,
    ITEM1_STATS,
    LENGTHS,
    OURS_FLEX,
    OURS_SDPA,
    OURS_STATS,
    SHAPES,
    STOCK,
    T5_BASE,
    Variant,
    configure,
    encode,
    encoder_modules,
    random_ids,
    t5_encoder,
)
from bench_gpu_paper_b import PaperBTraining  # noqa: E402
from bench_gpu_report import loglog_growth, render  # noqa: E402

__all__ = ["LENGTHS", "OURS_FLEX", "OURS_SDPA", "OURS_STATS", "SHAPES", "STOCK", "T5_BASE", "Bench", "Variant",
           "configure", "encode", "encoder_modules", "loglog_growth", "main", "random_ids", "render", "run", "t5_encoder"]


class Bench(BenchCore, EncoderTiming, Correctness, Algorithm1Timing, PaperBTraining):
    """The whole benchmark: the run's bookkeeping and the four items, the budget counted from this script's start."""

    def __init__(self, args: argparse.Namespace):
        super().__init__(args, t0=T_START)


def run(args: argparse.Namespace) -> Bench:
    """Every item, most important first; each step checks the budget."""
    import torch._dynamo

    bench = Bench(args)
    # FlexAttention compiles once per shape (and float scale): more than the default limit of 8 in this run,
    # after which dynamo would fall back to the unfused kernel that materialises the scores
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, 64)
    # the tiled softmax with statistics is launch-bound on a GPU: the shortest length first (it predicts the
    # others), then the longest (the target), the other lengths last
    lengths = bench.lengths
    ends = tuple(dict.fromkeys((min(lengths), max(lengths))))
    middle = tuple(n for n in lengths if n not in ends)
    steps = [(2, bench.item2), (4, bench.item4), (3, lambda: bench.item3(full_rows=False)),
             (1, lambda: bench.item1(ITEM1_CORE)), (1, lambda: bench.item1(ITEM1_STATS, ends)),
             (1, lambda: bench.item1(ITEM1_EXTRA)), (1, lambda: bench.item1(ITEM1_STATS, middle)),
             (3, lambda: bench.item3(full_rows=True))]
    bench.save()
    for item, step in steps:
        if item in set(args.items):
            try:
                step()  # its models are dropped when it returns
            except Exception as err:  # noqa: BLE001 - e.g. a model too large to build: record, go on
                traceback.print_exc(limit=4)
                bench.failures.append(f"item {item}: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
            bench.clean()
    bench.save()
    return bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes and lengths, any device (exercises the script)")
    p.add_argument("--out", default=None, help="report path (default results/bench/gpu.md, or gpu_smoke.md with "
                   "--smoke); raw numbers go to the same name with .json")
    p.add_argument("--budget-s", type=float, default=540.0, help="wall-time budget of the whole run")
    p.add_argument("--lengths", type=int, nargs="+", help="item 1's lengths (default 2048 4096 8192 15360)")
    p.add_argument("--variants", nargs="+", default=None, help="items 1-2: only these variants (e.g. stock-sdpa "
                   "lengthx-sdpa lengthx+stats lengthx+triton); the others are rows 'not asked for'")
    p.add_argument("--items", type=int, nargs="+", default=[1, 2, 3, 4], choices=[1, 2, 3, 4])
    p.add_argument("--device", default="auto", help="auto (cuda if available), cuda or cpu")
    p.add_argument("--calib-row-stride", type=int, default=16, help="item 3's measured searches: statistics from "
                   "every n-th query row")
    p.add_argument("--cpu-flex", action="store_true", help="also run FlexAttention on the CPU (torch.compile)")
    args = p.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.out is None:
        args.out = str(ROOT / "results" / "bench" / ("gpu_smoke.md" if args.smoke else "gpu.md"))
    if not args.smoke and not args.device.startswith("cuda"):
        print("no CUDA device: the full shapes need a GPU (use --smoke to exercise the script)", file=sys.stderr)
        return 2
    bench = run(args)
    print(Path(args.out).read_text())
    return 0 if not bench.failures and all(c["status"] != "error" for c in bench.cells) else 1


if __name__ == "__main__":
    sys.exit(main())
