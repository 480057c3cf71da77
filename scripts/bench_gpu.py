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
   loop on a GPU (``scripts/bench_training_memory.py``'s builder, batches and step).

The run keeps to ``--budget-s`` of wall time: cells run most important first, a cell whose predicted time
does not fit is reported "skipped: budget", and slow cells are stopped at the budget. Each cell is guarded:
an out-of-memory or any error is recorded in its row (one line) and the run goes on. The report is
rewritten after every cell (``results/bench/gpu.md``, raw numbers in ``gpu.json`` beside it).

    python scripts/bench_gpu.py                 # on a GPU -> results/bench/gpu.md (make bench-gpu)
    python scripts/bench_gpu.py --smoke         # tiny shapes, any device -> results/bench/gpu_smoke.md
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

T_START = time.monotonic()  # the budget counts from here: torch and transformers take seconds to import
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_attention import CONFIG as T5_BASE  # noqa: E402
from bench_training_memory import build_model, make_batches, train_step  # noqa: E402
from transformers import T5Config, T5EncoderModel  # noqa: E402

from lengthx.alignment.algorithm1 import CalibrationOptions, calibrate, find_s  # noqa: E402
from lengthx.attention import tiled_softmax  # noqa: E402
from lengthx.attention.stats import AttentionStats  # noqa: E402
from lengthx.attention.t5_bias import disable_efficient_t5, enable_efficient_t5  # noqa: E402
from lengthx.attention.temperature import ATTN_NAME, clear_temperature, register, set_temperature  # noqa: E402
from lengthx.models import LoadedModel, get_family  # noqa: E402
from lengthx.segmented.loop import build_optimizer  # noqa: E402
from lengthx.segmented.models import prepare_for_length  # noqa: E402
from lengthx.segmented.sampling import SegmentMethod  # noqa: E402

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
    note: str = ""

    @property
    def flex(self) -> bool:
        return self.backend == "flex"

    @property
    def tiled(self) -> bool:
        """Runs the offset table's tiled explicit softmax (statistics of every row on the offset table)."""
        return self.backend is not None and self.stats == 1


STOCK = Variant("stock-sdpa", attn="sdpa", note="transformers SDPA, (1, H, L, L) bias")
DENSE_STATS = Variant("dense+stats", stats=1, note="stock bias, lengthx query-blocked softmax + P_max/entropy")
EXPLICIT = Variant("dense-explicit", stats=1, note="the correctness reference")
OURS_SDPA = Variant("lengthx-sdpa", backend="sdpa", note="offset table, SDPA over the zero-copy view")
OURS_FLEX = Variant("lengthx-flex", backend="flex", note="offset table, FlexAttention (on request)")
OURS_STATS = Variant("lengthx+stats", backend="sdpa", stats=1,
                     note="offset table, tiled softmax + P_max/entropy (any backend with statistics)")
OURS_STATS_TILES = Variant("lengthx+stats[per-head tiles]", backend="sdpa", stats=1, per_head_tiles=True,
                           note="the same with the CPU's per-head tiles forced on any device")
FLEX_SAMPLED = Variant("lengthx-flex+stats/16", backend="flex", stats=16,
                       note="FlexAttention + statistics of every 16th row")
ITEM1_CORE = (OURS_FLEX, OURS_SDPA, STOCK)  # per length: lengthx first, stock (the likeliest OOM) last
ITEM1_EXTRA = (FLEX_SAMPLED, OURS_STATS_TILES, DENSE_STATS)
ITEM1_ORDER = (STOCK, OURS_SDPA, OURS_FLEX, DENSE_STATS, OURS_STATS, OURS_STATS_TILES, FLEX_SAMPLED)


class BudgetExceeded(Exception):
    """A slow cell ran into the end of the time budget."""


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`BudgetExceeded` in this (main) thread after ``seconds`` (the tiled softmax is a Python
    loop, so the signal lands between kernel launches)."""
    if not seconds or not hasattr(signal, "setitimer"):
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise BudgetExceeded(f"stopped at the budget after {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


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
        enable_efficient_t5(model, mode="always", backend=v.backend)


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


def loglog_growth(points: list[tuple[int, float]]) -> dict[str, Any] | None:
    """How memory increments (GiB) grow with L: GiB per 1k = 1024 tokens (least squares), the log-log slope (≤ 1 for
    a linear cost with a constant part, up to 2 for a quadratic one) and, with 3 points or more, the marginal
    ratio: GiB per token over the last interval / over the one before (1 if linear; (L₃ + L₂)/(L₂ + L₁) if
    quadratic, 1.92 for 4k, 8k, 15k)."""
    pts = sorted((n, m) for n, m in points if m is not None and m > 0)
    if len(pts) < 2:
        return None
    n = np.array([p[0] for p in pts], dtype=float)
    m = np.array([p[1] for p in pts], dtype=float)
    marginal = None
    if len(pts) >= 3:
        before, last = (m[-2] - m[-3]) / (n[-2] - n[-3]), (m[-1] - m[-2]) / (n[-1] - n[-2])
        marginal = float(last / before) if before > 0 else None
    return {"gib_per_1k": float(np.polyfit(n / 1024, m, 1)[0]), "points": len(pts),
            "loglog": float(np.polyfit(np.log(n), np.log(m), 1)[0]), "marginal_ratio": marginal}


class Bench:
    """The run: device, budget, results (one dict per cell) and the report, rewritten after every cell."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.t0 = T_START
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.smoke = args.smoke
        self.shapes = SMOKE_SHAPES if args.smoke else SHAPES
        self.lengths = tuple(args.lengths or (SMOKE_LENGTHS if args.smoke else LENGTHS))
        self.cells: list[dict[str, Any]] = []
        self.failures: list[str] = []  # steps that failed outside any cell (a model that could not be built)
        self.meta = self._meta()

    # ---- bookkeeping -------------------------------------------------------------------------------------

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.t0)

    def _meta(self) -> dict[str, Any]:
        import transformers

        meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
                "transformers": transformers.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                "host": f"{platform.machine()}, {os.cpu_count()} CPUs", "smoke": self.smoke,
                "budget_s": self.args.budget_s, "flex_available": tiled_softmax.flex_available(),
                "on_cuda": self.cuda}
        if self.cuda:
            prop = torch.cuda.get_device_properties(self.device)
            meta.update(device=f"{prop.name} ({prop.total_memory / 2**30:.1f} GiB, sm_{prop.major}{prop.minor})",
                        cudnn=torch.backends.cudnn.version())
        else:
            meta["device"] = f"CPU ({platform.processor() or platform.machine()}), torch threads {torch.get_num_threads()}"
        return meta

    def record(self, cell: dict[str, Any]) -> dict[str, Any]:
        cell["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        self.cells.append(cell)
        status = cell.get("status")
        brief = {k: cell[k] for k in ("time_s", "peak_gib", "tokens_s", "max_err_out") if k in cell}
        print(f"[{cell['elapsed_s']:6.1f}s] item {cell['item']} {cell.get('shape', '')} {cell.get('variant', '')} "
              f"L={cell.get('length', '')} {status} {brief} {cell.get('error', '')}", file=sys.stderr, flush=True)
        self.save()
        return cell

    def find(self, item: int, **match: Any) -> list[dict[str, Any]]:
        return [c for c in self.cells if c["item"] == item and all(c.get(k) == v for k, v in match.items())]

    def save(self) -> None:
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps({"meta": self.meta, "cells": self.cells,
                                                        "failures": self.failures}, indent=1, default=str) + "\n")
        text = render(self.meta, self.cells, self.lengths, self.smoke)
        if self.failures:
            text += "\n## Failures outside the cells\n\n" + "\n".join(f"- {f}" for f in self.failures) + "\n"
        out.write_text(text)

    # ---- measuring ---------------------------------------------------------------------------------------

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def clean(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)

    def allocated(self) -> float | None:
        return torch.cuda.memory_allocated(self.device) / 2**30 if self.cuda else None

    def peak(self) -> float | None:
        return torch.cuda.max_memory_allocated(self.device) / 2**30 if self.cuda else None

    def timed(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        """(seconds, result) of ``fn``: CUDA events on a GPU, ``perf_counter`` on the CPU."""
        if not self.cuda:
            t0 = time.perf_counter()
            res = fn()
            return time.perf_counter() - t0, res
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        res = fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000, res

    def guarded(self, cell: dict[str, Any], fn: Callable[[], dict[str, Any]], limit: float | None = None) -> dict:
        """Run ``fn`` for ``cell``; an OOM, a stop at the budget or any error goes into the cell as one line."""
        self.clean()
        try:
            with deadline(limit):
                cell.update(fn())
            cell.setdefault("status", "ok")
        except torch.cuda.OutOfMemoryError as err:
            cell.update(status="OOM", error=str(err).splitlines()[0][:160])
        except BudgetExceeded as err:
            cell.update(status="stopped", error=str(err))
        except Exception as err:  # noqa: BLE001 - a failing cell is a result, the run goes on
            text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
            oom = "out of memory" in text.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in text
            cell.update(status="OOM" if oom else "error", error=text)
            if not oom:
                traceback.print_exc(limit=4)
        self.clean()
        return self.record(cell)

    def unavailable(self, v: Variant) -> str | None:
        """Why variant ``v`` cannot run here (None when it can)."""
        if v.flex and not tiled_softmax.flex_available():
            return "n/a (no FlexAttention in this torch)"
        if v.flex and not self.cuda and not self.args.cpu_flex:
            return "n/a (CUDA only)"
        return None

    # ---- item 1: the XXL encoder -------------------------------------------------------------------------

    def forward_cell(self, model: T5EncoderModel, ids: torch.Tensor, v: Variant) -> dict[str, Any]:
        """Warm-up (full length; the launch-bound tiled cells a short prefix), then timed forwards: the
        median of up to 5, peak and increment of GPU memory over them, S̄ of P_max / entropy if captured."""
        configure(model, v)
        slow = v.tiled and (v.per_head_tiles or ids.device.type == "cpu")
        encode(model, ids[:, :WARM_TOKENS] if slow else ids, v)
        self.sync()
        self.clean()
        base = self.allocated()
        times: list[float] = []
        stats = None
        while True:
            stats = None
            t, (_, stats) = self.timed(lambda: encode(model, ids, v))
            times.append(t)
            reps = 5 if times[0] < 0.3 else 3 if times[0] < 3 else 1
            if len(times) >= reps or self.left() < RESERVE_S + 2 * t:
                break
        res: dict[str, Any] = {"time_s": _median(times), "times": times, "runs": len(times)}
        if self.cuda:
            res.update(peak_gib=self.peak(), base_gib=base, inc_gib=self.peak() - base)
        if stats is not None:
            res.update(pmax=stats.mean("pmax"), entropy=stats.mean("entropy"))
        return res

    def item1(self, variants: tuple[Variant, ...], lengths: tuple[int, ...] | None = None) -> None:
        shape = self.shapes["xxl"]
        model = None
        for n in self.lengths if lengths is None else lengths:
            for v in variants:
                cell = {"item": 1, "shape": "xxl", "variant": v.name, "length": n}
                why = self.unavailable(v)
                if why is not None:
                    self.record({**cell, "status": why})
                    continue
                predicted = self.predict(v, n)
                if self.left() < RESERVE_S + max(predicted, 5.0):
                    self.record({**cell, "status": "skipped: budget", "predicted_s": round(predicted, 1)})
                    continue
                if model is None:
                    model = t5_encoder(shape, self.device, torch.bfloat16)
                    ids_all = random_ids(max(self.lengths), T5_BASE["vocab_size"], self.device)
                ids = ids_all[:, :n]
                self.guarded(cell, lambda m=model, x=ids, v=v: self.forward_cell(m, x, v),
                             limit=self.left() - RESERVE_S)

    def predict(self, v: Variant, n: int) -> float:
        """Predicted seconds of a cell (warm-up and runs) from the same variant at the longest shorter length:
        quadratic in L (the tiled softmax launches one kernel set per tile, and tiles grow as L²); 0 if none."""
        done = [c for c in self.find(1, variant=v.name, status="ok") if c["length"] < n]
        if not done:
            return 0.0
        last = max(done, key=lambda c: c["length"])
        return last["time_s"] * (n / last["length"]) ** 2 * (1 if v.tiled and v.per_head_tiles else 2)

    # ---- item 2: correctness -----------------------------------------------------------------------------

    def item2(self) -> None:
        n = 128 if self.smoke else 2048
        for shape_name in ("large", "xl"):
            if self.left() < RESERVE_S + 30:
                self.record({"item": 2, "shape": shape_name, "status": "skipped: budget", "length": n})
                continue
            rows: list[dict[str, Any]] = []  # filled row by row: a failure keeps what finished before it
            cell = {"item": 2, "shape": shape_name, "length": n, "variant": "all", "rows": rows}
            self.guarded(cell, lambda name=shape_name, rows=rows: self.correctness(name, n, rows))

    def correctness(self, shape_name: str, n: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Item 2 on one shape: appends one row per (τ, path) to ``rows``."""
        model = t5_encoder(self.shapes[shape_name], self.device, torch.float32, seed=1)
        with torch.no_grad():  # the fp32 reference runs the very weights the bf16 paths run
            for param in model.parameters():
                param.copy_(param.to(torch.bfloat16))
        modules = encoder_modules(model)
        ids = random_ids(n, T5_BASE["vocab_size"], self.device, seed=2)
        taus = (1.0, 0.7)
        ref32 = {}
        configure(model, EXPLICIT)
        for tau in taus:
            set_temperature(modules, tau)
            ref32[tau] = _summary(*encode(model, ids, EXPLICIT))
        model.to(torch.bfloat16)
        for tau in taus:
            set_temperature(modules, tau)
            configure(model, EXPLICIT)
            ref = _summary(*encode(model, ids, EXPLICIT))
            floor = _errors(ref, ref32[tau])
            scale = float(ref32[tau]["out"].abs().max())
            tol = {"out": TOL_FACTOR * floor["out"] + 1e-3 * scale, "pmax": TOL_FACTOR * floor["pmax"] + 1e-4,
                   "entropy": TOL_FACTOR * floor["entropy"] + 1e-3}
            rows.append({"shape": shape_name, "tau": tau, "path": "dense-explicit bf16 vs fp32", "errors": floor,
                         "tol": None, "ok": None})
            for v in (OURS_SDPA, OURS_FLEX, OURS_STATS, STOCK):
                row: dict[str, Any] = {"shape": shape_name, "tau": tau, "path": v.name, "tol": tol}
                why = self.unavailable(v) or ("n/a (stock has no τ)" if v is STOCK and tau != 1.0 else None)
                if why is not None:
                    rows.append({**row, "status": why})
                    continue
                configure(model, v)
                clear_temperature(modules)
                if v is not STOCK:
                    set_temperature(modules, tau)
                try:
                    errs = _errors(_summary(*encode(model, ids, v)), ref)
                    ok = all(errs[k] <= tol[k] for k in errs if errs[k] is not None)
                    rows.append({**row, "status": "ok", "errors": errs, "ok": ok})
                except Exception as err:  # noqa: BLE001 - one failing path is a row, the others still run
                    rows.append({**row, "status": "error", "error": f"{type(err).__name__}: {err}"[:200]})
                    self.clean()
        clear_temperature(modules)
        return {}

    # ---- item 3: Algorithm 1 -----------------------------------------------------------------------------

    def item3(self, full_rows: bool) -> None:
        """Grid and bisection at row stride ``--calib-row-stride`` (measured), or (``full_rows``) one FindS
        pass over every row, from which the paper profile's searches are projected."""
        n = max(self.lengths) * 2 if self.smoke else max(self.lengths)
        l_tr = 64 if self.smoke else L_TR
        stride = self.args.calib_row_stride
        cell = {"item": 3, "shape": "xl", "length": n}
        if full_rows:
            done = self.find(3, search="bisect", status="ok")
            predicted = 0.0
            xxl = self.find(1, variant=OURS_STATS.name, length=n, status="ok")
            if xxl:  # the XXL cell's time scaled by heads (the tiled loop runs per head)
                predicted = xxl[0]["time_s"] * self.shapes["xl"]["num_heads"] / self.shapes["xxl"]["num_heads"]
            if self.left() < RESERVE_S + max(predicted, 10.0) or not done:
                self.record({**cell, "search": "one pass", "row_stride": 1, "status": "skipped: budget"
                             if done else "skipped: no measured search", "predicted_s": round(predicted, 1)})
                return
        if self.left() < RESERVE_S + 20:
            self.record({**cell, "search": "grid+bisect", "row_stride": stride, "status": "skipped: budget"})
            return
        model = t5_encoder(self.shapes["xl"], self.device, torch.bfloat16, seed=3)
        enable_efficient_t5(model, mode="auto", min_length=l_tr, backend="flex" if self.args.cpu_flex else "auto")
        loaded = LoadedModel("flan-t5-xl-shape", model, None, get_family("t5"), l_tr, self.device)
        ref = [{"input_ids": random_ids(l_tr, T5_BASE["vocab_size"], self.device, seed=4)}]
        ext = [{"input_ids": random_ids(n, T5_BASE["vocab_size"], self.device, seed=5)}]
        if full_rows:
            def one_pass() -> dict[str, Any]:
                t_ref, _ = self.timed(lambda: find_s(loaded, ref, 1.0, "pmax", row_stride=1))
                t, s = self.timed(lambda: find_s(loaded, ext, 0.8, "pmax", row_stride=1))
                return {"time_s": t, "ref_s": t_ref, "pmax": s}

            self.guarded({**cell, "search": "one pass", "row_stride": 1}, one_pass, limit=self.left() - RESERVE_S)
        else:
            # warm-up: FlexAttention compiles once per float `scale` it is given, and lengthx passes (1/τ)·τ,
            # which is 0.9999999999999999 at τ = 0.95 and 1.0 at every other grid point
            self.guarded({**cell, "search": "warm-up", "row_stride": stride},
                         lambda: {"time_s": sum(self.timed(lambda t=t: find_s(loaded, ext, t, "pmax",
                                                                              row_stride=stride))[0]
                                                for t in (1.0, 0.95))})
            for search in ("grid", "bisect"):
                def run(search: str = search) -> dict[str, Any]:
                    opts = CalibrationOptions("pmax", search=search, row_stride=stride)
                    t, res = self.timed(lambda: calibrate(loaded, ref, ext, opts))
                    return {"time_s": t, "tau": res.tau, "passes": res.forward_passes, "target": res.target}

                self.guarded({**cell, "search": search, "row_stride": stride}, run, limit=self.left() - RESERVE_S)

    # ---- item 4: paper B ---------------------------------------------------------------------------------

    def item4(self) -> None:
        if self.smoke:
            args = argparse.Namespace(vocab=50257, l_t=64, d_model=64, layers=2, attn="sdpa")
            warm, steps, batch_lt = 1, 2, 4
        else:  # GPT-2 small: 12 layers, 12 heads of 64, 1024 positions
            args = argparse.Namespace(vocab=50257, l_t=1024, d_model=768, layers=12, attn="sdpa")
            warm, steps, batch_lt = 3, 10, 8
        l_t, l_e = args.l_t, 4 * args.l_t
        for name in ("full", "chunk-0.25", "da"):
            method = SegmentMethod.parse(name)
            batch = batch_lt * l_t // method.train_length(l_t, l_e)
            cell = {"item": 4, "variant": name, "length": method.train_length(l_t, l_e), "batch": batch,
                    "l_t": l_t, "l_e": l_e}
            if self.left() < RESERVE_S + 15:
                self.record({**cell, "status": "skipped: budget"})
                continue

            def run(method: SegmentMethod = method, batch: int = batch) -> dict[str, Any]:
                model = build_model("gpt2", args)
                if method.kind != "da":
                    prepare_for_length(model, "gpt2", l_e)  # wpe interpolated to L_e (paper B §3.2)
                model.to(self.device).train()
                optimizer = build_optimizer(model, lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95))
                batches = make_batches(method, l_t, l_e, warm + steps, batch, args.vocab, self.device)
                autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if self.cuda else (lambda: None)
                for b in batches[:warm]:
                    train_step(model, optimizer, b, autocast())
                self.sync()
                self.clean()
                base = self.allocated()
                times = [self.timed(lambda b=b: float(train_step(model, optimizer, b, autocast())))[0]
                         for b in batches[warm:]]
                tokens = int(batches[0]["input_ids"].numel())
                res = {"step_s": _median(times), "tokens_per_step": tokens, "tokens_s": tokens / _median(times),
                       "max_position": int(batches[0]["position_ids"].max()) + 1, "steps": len(times),
                       "precision": "bf16 autocast" if self.cuda else "fp32"}
                if self.cuda:
                    res.update(peak_gib=self.peak(), base_gib=base, inc_gib=self.peak() - base)
                return res

            self.guarded(cell, run)


def _summary(out: torch.Tensor, stats: AttentionStats | None) -> dict[str, torch.Tensor | None]:
    return {"out": out.float().cpu(), "pmax": None if stats is None else stats.pmax().float(),
            "entropy": None if stats is None else stats.entropy().float()}


def _errors(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
    """Max abs difference of the encoder output and of the per-(layer, head) P_max and entropy."""
    return {k: None if a[k] is None or b[k] is None else float((a[k] - b[k]).abs().max())
            for k in ("out", "pmax", "entropy")}


# ---- the report --------------------------------------------------------------------------------------------


def _num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def _ratio(a: float | None, b: float | None) -> str:
    return "" if a is None or not b else f"{a / b:.2f}x"


def _k(n: int) -> str:
    return f"{n / 1024:g}k" if n >= 1024 and n % 512 == 0 else str(n)


def render(meta: dict[str, Any], cells: list[dict[str, Any]], lengths: tuple[int, ...], smoke: bool) -> str:
    """The Markdown report: device and versions, then one table per item."""
    cuda = bool(meta.get("on_cuda"))
    mem = (lambda x: _num(x, "{:.2f}")) if cuda else (lambda x: "n/a (CPU)")
    timer = "CUDA events" if cuda else "perf_counter"
    out = [f"# GPU benchmark{' (smoke run: tiny shapes)' if smoke else ''}", "",
           f"Generated by `scripts/bench_gpu.py{' --smoke' if smoke else ''}` on {meta['date']}: {meta['device']}; "
           f"host {meta['host']}; torch {meta['torch']} (CUDA {meta['cuda']}, cuDNN {meta.get('cudnn')}), "
           f"transformers {meta['transformers']}, Python {meta['python']}; FlexAttention available: "
           f"{meta['flex_available']}. Budget {meta['budget_s']:.0f} s of wall time. Random weights at the "
           "models' shapes; times are the median of the timed runs (warm-up excluded, " + timer + "); peak = "
           "`torch.cuda.max_memory_allocated` over the timed runs, increment = peak − allocated before them "
           "(weights, inputs).", ""]
    out += _render_item1(cells, lengths, mem, cuda)
    for item, title, section in ((2, "Correctness on the device", _render_item2),
                                 (3, "Algorithm 1 at the XL shape", _render_item3),
                                 (4, "Paper B at GPT-2 small's shape", lambda rows: _render_item4(rows, mem))):
        rows = [c for c in cells if c["item"] == item]
        out += section(rows) if rows else [f"## {item}. {title}", "", "not run", ""]
    return "\n".join(out) + "\n"


def _status(c: dict[str, Any] | None) -> str:
    if c is None:
        return "not run"
    return c["status"] + (f": {c['error']}" if c.get("error") else "")


def _render_item1(cells: list[dict[str, Any]], lengths: tuple[int, ...], mem: Callable, cuda: bool) -> list[str]:
    rows = [c for c in cells if c["item"] == 1]
    out = ["## 1. Flan-T5-XXL-shaped encoder (bf16, batch 1)", "",
           "Variants: " + "; ".join(f"`{v.name}` = {v.note}" for v in ITEM1_ORDER) + ".", "",
           "| L | variant | time s | × stock time | peak GiB | increment GiB | × stock peak | runs | S̄ P_max |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n in lengths:
        stock_cell = next((c for c in rows if c["length"] == n and c["variant"] == STOCK.name), None)
        stock = stock_cell if stock_cell is not None and stock_cell["status"] == "ok" else None
        for v in ITEM1_ORDER:
            c = next((c for c in rows if c["length"] == n and c["variant"] == v.name), None)
            if c is None or c["status"] != "ok":
                out.append(f"| {_k(n)} | {v.name} | {_status(c)} | | | | | | |")
                continue
            s_t, s_p = (stock["time_s"], stock.get("peak_gib")) if stock else (None, None)
            no_stock = f"stock {_status(stock_cell).split(':')[0]}" if stock is None else ""
            out.append(f"| {_k(n)} | {v.name} | {c['time_s']:.3f} | {_ratio(c['time_s'], s_t) or no_stock} | "
                       f"{mem(c.get('peak_gib'))} | {mem(c.get('inc_gib'))} | {_ratio(c.get('peak_gib'), s_p)} | "
                       f"{c['runs']} | {_num(c.get('pmax'), '{:.4f}') if 'pmax' in c else ''} |")
    out += ["", "Memory growth of the increment with L (least squares; log-log slope 1 = linear, 2 = quadratic):", ""]
    if not cuda:
        out += ["n/a (CPU: no allocator statistics)", ""]
    else:
        out += ["| variant | points | GiB per 1k tokens | log-log slope | marginal ratio (last / previous "
                "interval) |", "|---|---:|---:|---:|---:|"]
        for v in ITEM1_ORDER:
            fit = loglog_growth([(c["length"], c.get("inc_gib")) for c in rows
                                 if c["variant"] == v.name and c["status"] == "ok"])
            if fit is not None:
                out.append(f"| {v.name} | {fit['points']} | {fit['gib_per_1k']:.3f} | {fit['loglog']:.2f} | "
                           f"{_num(fit['marginal_ratio'], '{:.2f}')} |")
        out.append("")
    out += _targets(rows, lengths, cuda)
    return out


def _targets(rows: list[dict[str, Any]], lengths: tuple[int, ...], cuda: bool) -> list[str]:
    """The issue's targets, each with its verdict."""
    ok = {(c["variant"], c["length"]): c for c in rows if c["status"] == "ok"}
    every = {(c["variant"], c["length"]): c for c in rows}
    top = max(lengths)

    def stats_at_top(v: Variant) -> str:
        c = ok.get((v.name, top))
        if c is None:
            return f"{v.name} {_status(every.get((v.name, top)))}"
        return f"{v.name} {c['time_s']:.1f} s, peak {_num(c.get('peak_gib'), '{:.1f}')} GiB"

    lines = ["Targets:", "",
             f"- XXL shape at {_k(top)} with statistics (every row) on one card, the library's path: "
             f"{stats_at_top(OURS_STATS)} → {'PASS' if (OURS_STATS.name, top) in ok else 'FAIL'} "
             f"(with the CPU's per-head tiles: {stats_at_top(OURS_STATS_TILES)})"]
    speed = []
    for n in lengths:
        stock = ok.get((STOCK.name, n))
        best = [ok[(v.name, n)]["time_s"] for v in (OURS_SDPA, OURS_FLEX) if (v.name, n) in ok]
        if stock is not None and best:
            r = min(best) / stock["time_s"]
            speed.append(f"{_k(n)} {r:.2f}x {'PASS' if r <= 0.5 else 'FAIL'}")
        elif best:
            speed.append(f"{_k(n)} stock {_status(every.get((STOCK.name, n))).split(':')[0]}")
    lines.append("- efficient or Flex path ≤ 0.5x stock SDPA time where stock fits: " + ("; ".join(speed) or "n/a"))
    if cuda:
        fit = loglog_growth([(c["length"], c.get("inc_gib")) for c in rows
                             if c["variant"] == OURS_FLEX.name and c["status"] == "ok"])
        verdict = "n/a"
        if fit is not None:  # linear: marginal cost per token flat (or, with 2 points, log-log slope ≤ 1.2)
            linear = fit["marginal_ratio"] <= 1.3 if fit["marginal_ratio"] is not None else fit["loglog"] <= 1.2
            verdict = (f"{OURS_FLEX.name} {fit['gib_per_1k']:.3f} GiB per 1k tokens, log-log slope "
                       f"{fit['loglog']:.2f}, marginal ratio {_num(fit['marginal_ratio'], '{:.2f}')} → "
                       f"{'PASS' if linear else 'FAIL'}")
        lines.append(f"- memory linear in L (marginal ratio ≤ 1.3; quadratic would be ~1.9): {verdict}")
    return lines + [""]


def _render_item2(rows: list[dict[str, Any]]) -> list[str]:
    n = rows[0]["length"]
    out = [f"## 2. Correctness on the device ({_k(n)} tokens, bf16)", "",
           "Max abs difference against `dense-explicit` in bf16 (the stock bias, lengthx's explicit softmax) of "
           f"the encoder output and of the per-(layer, head) mean P_max and entropy; tolerance = {TOL_FACTOR:g} × "
           "that reference's own difference from the same computation in fp32 on the same (bf16-rounded) "
           "weights (first row of each block) + a floor (1e-3 × max |output|, 1e-4, 1e-3). Paths without "
           "statistics show n/a for them.", "",
           "| shape | τ | path | max Δ output | max Δ P_max | max Δ entropy | tolerance (out / P_max / H) | within |",
           "|---|---|---|---:|---:|---:|---|---|"]
    for c in rows:
        if c["status"] != "ok" and not c.get("rows"):
            out.append(f"| {c['shape']} | | | {_status(c)} | | | | |")
        for r in c.get("rows", []):
            if r.get("status", "ok") != "ok":
                out.append(f"| {r['shape']} | {r['tau']} | {r['path']} | {r['status']}"
                           f"{': ' + r['error'] if r.get('error') else ''} | | | | |")
                continue
            e, t = r["errors"], r["tol"]
            tol = "" if t is None else f"{t['out']:.2e} / {t['pmax']:.1e} / {t['entropy']:.1e}"
            within = "" if r["ok"] is None else ("yes" if r["ok"] else "NO")
            out.append(f"| {r['shape']} | {r['tau']} | {r['path']} | {_num(e['out'], '{:.2e}')} | "
                       f"{_num(e['pmax'], '{:.2e}')} | {_num(e['entropy'], '{:.2e}')} | {tol} | {within} |")
        if c["status"] != "ok" and c.get("rows"):
            out.append(f"| {c['shape']} | | (stopped) | {_status(c)} | | | | |")
    return out + [""]


def _render_item3(rows: list[dict[str, Any]]) -> list[str]:
    n = rows[0]["length"]
    out = [f"## 3. Algorithm 1 at the XL shape: L_tr reference → {_k(n)} tokens (1 example each, mode pmax)", "",
           "| search | row stride | forward passes | τ | time s | s per pass | how |", "|---|---:|---:|---:|---:|---:|---|"]
    for c in rows:
        if c["status"] != "ok":
            out.append(f"| {c.get('search', '')} | {c.get('row_stride', '')} | | | {_status(c)} | | |")
            continue
        if c["search"] in ("grid", "bisect"):
            passes = c["passes"] + 1  # the reference pass at L_tr
            out.append(f"| {c['search']} | {c['row_stride']} | {passes} | {c['tau']} | {c['time_s']:.2f} | "
                       f"{c['time_s'] / passes:.2f} | measured (incl. 1 reference pass) |")
        elif c["search"] == "warm-up":
            out.append(f"| (warm-up: FindS at τ = 1 and 0.95) | {c['row_stride']} | 2 | | {c['time_s']:.2f} | | "
                       "measured, not in the searches (FlexAttention compiles) |")
        else:
            out.append(f"| one FindS pass | 1 | 1 | | {c['time_s']:.2f} | {c['time_s']:.2f} | measured "
                       f"(reference pass {c['ref_s']:.2f} s) |")
            for s in rows:
                if s.get("search") in ("grid", "bisect") and s["status"] == "ok":
                    proj = s["passes"] * c["time_s"] + c["ref_s"]
                    out.append(f"| {s['search']} | 1 | {s['passes'] + 1} | | ~{proj:.3g} | {c['time_s']:.2f} | "
                               f"projected: {s['passes']} passes as at stride {s['row_stride']} × one pass |")
    return out + [""]


def _render_item4(rows: list[dict[str, Any]], mem: Callable) -> list[str]:
    lt = rows[0]["l_t"]
    full = next((c for c in rows if c["variant"] == "full" and c["status"] == "ok"), None)
    out = [f"## 4. Paper B at GPT-2 small's shape: training at L_t = {lt}, L_e = 4·L_t", "",
           "Same tokens per step for every method; forward, backward and AdamW step; ratios to `full`.", "",
           "| method | tokens/seq | batch | max position | precision | tokens/s | × full | s/step | peak GiB | "
           "increment GiB | × full peak |", "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for c in rows:
        if c["status"] != "ok":
            out.append(f"| {c['variant']} | {c['length']} | {c['batch']} | | | {_status(c)} | | | | | |")
            continue
        f_t, f_p = (full["tokens_s"], full.get("peak_gib")) if full else (None, None)
        out.append(f"| {c['variant']} | {c['length']} | {c['batch']} | {c['max_position']} | {c['precision']} | "
                   f"{c['tokens_s']:,.0f} | {_ratio(c['tokens_s'], f_t)} | {c['step_s']:.3f} | "
                   f"{mem(c.get('peak_gib'))} | {mem(c.get('inc_gib'))} | {_ratio(c.get('peak_gib'), f_p)} |")
    return out + [""]


# ---- the run -------------------------------------------------------------------------------------------------


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
             (1, lambda: bench.item1(ITEM1_CORE)), (1, lambda: bench.item1((OURS_STATS,), ends)),
             (1, lambda: bench.item1(ITEM1_EXTRA)), (1, lambda: bench.item1((OURS_STATS,), middle)),
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
