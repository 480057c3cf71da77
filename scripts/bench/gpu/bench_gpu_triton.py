"""The Triton statistics pass against lengthx's SDPA path and the device blocks, Flan-T5-XXL shape, on one GPU.

What paper A's Algorithm 1 (§4) runs per τ is one encoder forward with P_max and entropy of every query row.
On a GPU that took 1.4-1.5x stock SDPA's time over the explicit device blocks, 12x lengthx's SDPA path at 15k
tokens (``results/bench/gpu-stats.md``); ``attention.stats_backend=triton``
(``lengthx/attention/triton_stats.py``, docs/gpu.md) computes output and statistics in one flash-style
pass. Target: at most 1.2x the SDPA path at 8k and 15k tokens (bf16, every row). Measured here, bf16, batch 1:

1. **Correctness first**: the kernel at 1k tokens (2 examples, padded, 4 heads × 64) against the fp64 explicit
   softmax at τ = 1, 0.85, 0.7, 0.5, fp32 inputs (held to 1e-4) and bf16 inputs (statistics to 1e-4, output
   to 2·2^-8·max|v|, the argument of tests/test_triton_stats.py).
2. **One attention call** at the XXL shape (64 heads × d_kv 64), through ``RelativeBiasTable.attend`` as the
   encoder calls it, τ = 0.7: ``sdpa`` (the offset table's SDPA over the bias view, no statistics),
   ``blocks`` (statistics of every row over the explicit device blocks: ``stats_backend=blocks``),
   ``triton`` (every row), ``triton/16`` (every 16th row), and the kernel itself without statistics
   (``kernel-nostats``) and without its one-bias-per-tile shortcut (``kernel-gather``).
3. **The 24-layer XXL encoder forward** (random weights; block 0's bias from N(0, 2)), τ = 0.7:
   ``lengthx-sdpa``, ``lengthx+stats`` (blocks), ``lengthx+triton``, ``lengthx+triton/16``; the largest
   difference of the per-(layer, head) S̄ of P_max and entropy between blocks and triton is reported.

Times: CUDA events, warm-up (with the autotuning) excluded, median of 5 (3 above 1 s, 1 above 5 s); memory:
``torch.cuda.max_memory_allocated`` over the timed runs, and its increment over what was allocated before.
The report (``results/bench/gpu-triton.md``, raw numbers in ``.json`` beside it) is rewritten after every
cell; a cell that fails or runs out of memory is a row, and the run goes on.

    python scripts/bench/gpu/bench_gpu_triton.py                  # on a GPU -> results/bench/gpu-triton.md
    python scripts/bench/gpu/bench_gpu_triton.py --smoke          # CPU, TRITON_INTERPRET=1, tiny shapes -> gpu-triton_smoke.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

if "--smoke" in sys.argv:  # the interpreter is chosen when triton compiles the kernel: before any import
    os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import T5Config, T5EncoderModel  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

from lengthx.attention.stats import AttentionStats, softmax_stats_, stats_from_sums  # noqa: E402
from lengthx.attention.t5_bias import RelativeBiasTable, enable_efficient_t5, triton_kernel  # noqa: E402
from lengthx.attention.temperature import AttentionCall, register, set_temperature  # noqa: E402
from lengthx.models import get_family  # noqa: E402

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # gpu/, bench/
from bench_gpu_core import free_device, timed  # noqa: E402

XXL = dict(vocab_size=32128, d_model=4096, num_heads=64, d_kv=64, d_ff=10240, num_layers=24)
SMOKE = dict(vocab_size=128, d_model=64, num_heads=4, d_kv=16, d_ff=128, num_layers=2)
T5_COMMON = dict(relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0,
                 feed_forward_proj="gated-gelu", is_encoder_decoder=False, use_cache=False)
TAU = 0.7  # Algorithm 1 tries τ < 1; speed does not depend on it
TAUS = (1.0, 0.85, 0.7, 0.5)
CALL_VARIANTS = ("sdpa", "blocks", "triton", "triton/16", "kernel-nostats", "kernel-gather")
ENCODER_VARIANTS = {"lengthx-sdpa": ("auto", 0), "lengthx+stats": ("blocks", 1), "lengthx+triton": ("triton", 1),
                    "lengthx+triton/16": ("triton", 16)}
TARGET = 1.2


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.cells: list[dict[str, Any]] = []
        self.t0 = time.monotonic()

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.t0)

    def clean(self) -> None:
        free_device(self.device)

    def timed(self, fn: Callable[[], Any]) -> float:
        return timed(self.device, fn)[0]

    def measure(self, fn: Callable[[], Any]) -> dict[str, Any]:
        """Warm-up, then the median of up to 5 timed runs, with peak memory and its increment."""
        fn()
        self.clean()
        base = torch.cuda.memory_allocated(self.device) / 2**30 if self.cuda else None
        times = [self.timed(fn)]
        reps = 1 if self.args.smoke or times[0] > 5 else 3 if times[0] > 1 else 5
        while len(times) < reps and self.left() > 2 * times[0]:
            times.append(self.timed(fn))
        res = {"time_s": statistics.median(times), "times": times}
        if self.cuda:
            peak = torch.cuda.max_memory_allocated(self.device) / 2**30
            res.update(peak_gib=peak, inc_gib=peak - base)
        return res

    def cell(self, section: int, fields: dict[str, Any], fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run one cell; an out-of-memory or any error is its row, the budget skips it; the report is saved."""
        cell = {"section": section, **fields}
        if self.left() < 5:
            cell["status"] = "skipped: budget"
        else:
            self.clean()
            try:
                cell.update(fn())
                cell.setdefault("status", "ok")
            except torch.cuda.OutOfMemoryError:
                cell["status"] = "OOM"
            except Exception as err:  # noqa: BLE001 - a failing cell is a result
                traceback.print_exc(limit=6)
                cell.update(status="error", error=f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")
        self.cells.append(cell)
        self.clean()
        self.save()
        return cell

    def save(self) -> None:
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render(self))
        out.with_suffix(".json").write_text(json.dumps({"meta": meta(self), "cells": self.cells}, indent=1,
                                                       default=str))


# ---- 1. correctness -------------------------------------------------------------------------------------------


def kernel_errors(bench: Bench, dtype: torch.dtype, tau: float) -> dict[str, Any]:
    """Max |difference| of the kernel's output, P_max and entropy against the fp64 explicit softmax."""
    n, h, d = (64, 2, 16) if bench.args.smoke else (1024, 4, 64)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, n, d, generator=g) for _ in range(3))
    k = k + torch.linspace(0, 2, n)[None, None, :, None] * q.mean(2, keepdim=True)  # row maxima rise along keys
    table = 2.0 * torch.randn(h, 2 * n - 1, generator=g)
    keep = torch.ones(2, n, dtype=torch.bool)
    keep[0, n - n // 3:] = False
    keep[1, : n // 5] = False
    q, k, v, table = (t.to(bench.device, dtype) for t in (q, k, v, table))
    keep = keep.to(bench.device)
    out, z, w = triton_kernel().attention_stats(q, k, v, table, 1 / tau, 1 / tau, keep)
    i = torch.arange(n, device=bench.device)
    s = (q.double() @ k.double().transpose(-1, -2) + table.double()[:, i[None, :] - i[:, None] + n - 1]) / tau
    s = s.masked_fill(~keep[:, None, None, :], torch.finfo(torch.float64).min)
    ref = (torch.softmax(s, -1) @ v.double()).transpose(1, 2)
    _, _, pmax, entropy = softmax_stats_(s)
    pm, en = stats_from_sums(z, w)
    errs = {"out": (out.double() - ref).abs().max().item(), "pmax": (pm.double() - pmax).abs().max().item(),
            "entropy": (en.double() - entropy).abs().max().item()}
    tol = {"out": 1e-4 if dtype == torch.float32 else 2 * 2**-8 * v.abs().max().item(), "pmax": 1e-4,
           "entropy": 1e-4}
    return {"errors": errs, "tol": tol, "ok": all(errs[x] <= tol[x] for x in errs)}


# ---- 2. one attention call ------------------------------------------------------------------------------------


def call_fn(bench: Bench, n: int, variant: str) -> Callable[[], Any]:
    """One encoder attention call of ``variant`` at n tokens, as ``RelativeBiasTable.attend`` runs it."""
    shape = SMOKE if bench.args.smoke else XXL
    h, d = shape["num_heads"], shape["d_kv"]
    g = torch.Generator(device=bench.device).manual_seed(0)
    q, k, v = (torch.randn(1, n, h, d, generator=g, device=bench.device, dtype=torch.bfloat16).transpose(1, 2)
               for _ in range(3))  # (B, H, L, D) views of (B, L, H, D), as T5 hands them over
    table = 2.0 * torch.randn(h, 32, generator=g, device=bench.device, dtype=torch.bfloat16)
    offsets = torch.arange(-(n - 1), n, device=bench.device)  # the table T5's block 0 builds: 32 buckets
    ids = T5Attention._relative_position_bucket(offsets, bidirectional=True, num_buckets=32, max_distance=128)
    table = table[:, ids].contiguous()
    module = torch.nn.Module().eval()
    if variant.startswith("kernel"):
        kern = triton_kernel()
        stats, runs = variant != "kernel-nostats", variant != "kernel-gather"
        return lambda: kern.attention_stats(q, k, v, table, 1 / TAU, 1 / TAU, None, 1, stats=stats, runs=runs)
    stride = {"sdpa": 0, "flex": 0, "blocks": 1, "triton": 1, "triton/16": 16}[variant]
    backend = "triton" if variant.startswith("triton") else "blocks" if variant == "blocks" else "auto"

    def run() -> None:
        stats = AttentionStats([module], row_stride=stride) if stride else None
        bias = RelativeBiasTable(table, n, n, backend="flex" if variant == "flex" else "sdpa", stats_backend=backend)
        with torch.inference_mode():
            bias.attend(AttentionCall(module, q, k, v, None, scaling=1.0, position_bias=bias, tau=TAU, stats=stats))

    return run


# ---- 3. the encoder -------------------------------------------------------------------------------------------


def encoder(bench: Bench) -> T5EncoderModel:
    register()
    torch.manual_seed(0)
    cfg = T5Config(**{**T5_COMMON, **(SMOKE if bench.args.smoke else XXL)})
    with torch.device(bench.device):
        model = T5EncoderModel._from_config(cfg, dtype=torch.bfloat16)
    model = model.to(bench.device).eval()
    with torch.no_grad():
        model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.normal_(0, 2.0)
    set_temperature(get_family("t5").temperature_modules(model, "encoder"), TAU)
    return model


def encode(model: T5EncoderModel, ids: torch.Tensor, variant: str) -> AttentionStats | None:
    backend, stride = ENCODER_VARIANTS[variant]
    enable_efficient_t5(model, mode="always", backend="sdpa", stats_backend=backend)
    modules = get_family("t5").temperature_modules(model, "encoder")
    stats = AttentionStats(modules, row_stride=stride) if stride else None
    with torch.inference_mode(), stats if stats is not None else nullcontext():
        model(input_ids=ids)
    return stats


def run(bench: Bench) -> None:
    kern = triton_kernel()
    for dtype in (torch.float32, torch.bfloat16):
        for tau in TAUS:
            bench.cell(1, {"dtype": str(dtype).split(".")[-1], "tau": tau}, lambda t=tau, x=dtype:
                       kernel_errors(bench, x, t))
    for n in bench.args.lengths:
        for variant in CALL_VARIANTS:
            cell = bench.cell(2, {"length": n, "variant": variant},
                              lambda x=n, v=variant: bench.measure(call_fn(bench, x, v)))
            if variant.startswith("kernel") and kern.best_config():
                cell["config"] = kern.best_config()
    model = encoder(bench)
    for n in bench.args.lengths:
        ids = torch.randint(3, model.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))
        encoder_cells(bench, model, ids.to(bench.device))


def encoder_cells(bench: Bench, model: T5EncoderModel, ids: torch.Tensor) -> None:
    """Section 3 at one length: each variant timed, then the largest per-(layer, head) S̄ difference between
    the blocks and the Triton pass (statistics of every row)."""
    n = ids.shape[1]
    sums: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def fn(variant: str) -> dict[str, Any]:
        last: list[AttentionStats | None] = []
        res = bench.measure(lambda: last.append(encode(model, ids, variant)))
        stats = last[-1]
        if stats is not None:
            sums[variant] = (stats.pmax(), stats.entropy())
            res.update(pmax=stats.mean("pmax"), entropy=stats.mean("entropy"))
        return res

    for variant in ENCODER_VARIANTS:
        bench.cell(3, {"length": n, "variant": variant}, lambda v=variant: fn(v))
    if "lengthx+stats" in sums and "lengthx+triton" in sums:
        (pa, ea), (pb, eb) = sums["lengthx+stats"], sums["lengthx+triton"]
        bench.cells.append({"section": 3, "length": n, "variant": "Δ blocks vs triton", "status": "ok",
                            "dpmax": (pa - pb).abs().max().item(), "dentropy": (ea - eb).abs().max().item()})
        bench.save()


# ---- report ---------------------------------------------------------------------------------------------------


def meta(bench: Bench) -> dict[str, Any]:
    import transformers

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    dev = (f"{torch.cuda.get_device_name(bench.device)} ({torch.cuda.get_device_properties(bench.device).total_memory / 2**30:.0f} GiB)"
           if bench.cuda else f"CPU ({platform.machine()}), TRITON_INTERPRET=1")
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": dev, "torch": torch.__version__,
            "cuda": torch.version.cuda, "triton": triton_version, "transformers": transformers.__version__,
            "python": platform.python_version(), "smoke": bench.args.smoke, "budget_s": bench.args.budget_s}


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else ""


def _mem(c: dict[str, Any], key: str) -> str:
    return f"{c[key]:.2f}" if c.get(key) is not None else "n/a"


def _table(cells: list[dict[str, Any]], base: str, variants: list[str], extra: Callable[[dict], str]) -> list[str]:
    out = ["| L | variant | time s | × " + base + " | peak GiB | increment GiB | runs | |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for n in dict.fromkeys(c["length"] for c in cells):
        ref = next((c for c in cells if c["length"] == n and c["variant"] == base and c["status"] == "ok"), None)
        for c in (c for c in cells if c["length"] == n and c["variant"] in variants):
            if c["status"] != "ok":
                out.append(f"| {n} | {c['variant']} | {c['status']} {c.get('error', '')} | | | | | |")
                continue
            out.append(f"| {n} | {c['variant']} | {c['time_s']:.4f} | {_ratio(c['time_s'], ref and ref['time_s'])} "
                       f"| {_mem(c, 'peak_gib')} | {_mem(c, 'inc_gib')} | {len(c['times'])} | {extra(c)} |")
    return out + [""]


def render(bench: Bench) -> str:
    m = meta(bench)
    timer = "CUDA events" if bench.cuda else "perf_counter (interpreter: not a speed)"
    out = [f"# Triton statistics pass{' (smoke run: tiny shapes, CPU interpreter)' if m['smoke'] else ''}", "",
           f"Generated by `scripts/bench/gpu/bench_gpu_triton.py{' --smoke' if m['smoke'] else ''}` on {m['date']}: "
           f"{m['device']}; torch {m['torch']} (CUDA {m['cuda']}), triton {m['triton']}, transformers "
           f"{m['transformers']}, Python {m['python']}. Times: median of the timed runs ({timer}, warm-up and "
           f"autotuning excluded); τ = {TAU}. Target: `lengthx+triton` at most {TARGET}x `lengthx-sdpa`.", "",
           "## 1. Correctness against the fp64 explicit softmax", "",
           "| dtype | τ | output | P_max | entropy | tolerances (output, P_max, entropy) | ok |", "|---|---:|---|---|---|---|---|"]
    for c in (c for c in bench.cells if c["section"] == 1):
        if c["status"] != "ok":
            out.append(f"| {c['dtype']} | {c['tau']} | {c['status']} {c.get('error', '')} | | | | |")
            continue
        e, t = c["errors"], c["tol"]
        out.append(f"| {c['dtype']} | {c['tau']} | {e['out']:.2e} | {e['pmax']:.2e} | {e['entropy']:.2e} | "
                   f"{t['out']:.1e}, {t['pmax']:.0e}, {t['entropy']:.0e} | {'yes' if c['ok'] else 'NO'} |")
    shape = SMOKE if m["smoke"] else XXL
    out += ["", f"## 2. One attention call ({shape['num_heads']} heads × {shape['d_kv']}, bf16, batch 1)", ""]
    out += _table([c for c in bench.cells if c["section"] == 2], "sdpa", list(CALL_VARIANTS),
                  lambda c: c.get("config", ""))
    out += [f"## 3. The encoder forward ({shape['num_layers']} layers, d_model {shape['d_model']}, bf16, batch 1)", ""]
    enc = [c for c in bench.cells if c["section"] == 3]
    out += _table(enc, "lengthx-sdpa", list(ENCODER_VARIANTS),
                  lambda c: f"S̄ P_max {c['pmax']:.4f}, H {c['entropy']:.4f}" if "pmax" in c else "")
    for c in (c for c in enc if c["variant"].startswith("Δ")):
        out.append(f"- {c['length']} tokens: per-(layer, head) S̄, blocks vs triton: max |Δ P_max| "
                   f"{c['dpmax']:.2e}, max |Δ entropy| {c['dentropy']:.2e} (the blocks compute the logits in bf16, the kernel in fp32)")
    for n in bench.args.lengths:
        a = next((c for c in enc if c["length"] == n and c["variant"] == "lengthx+triton" and c["status"] == "ok"),
                 None)
        b = next((c for c in enc if c["length"] == n and c["variant"] == "lengthx-sdpa" and c["status"] == "ok"),
                 None)
        if a and b and bench.cuda:
            ratio = a["time_s"] / b["time_s"]
            out.append(f"- target at {n} tokens: {ratio:.2f}x the SDPA path: "
                       f"{'met' if ratio <= TARGET else 'NOT met'} (≤ {TARGET}x)")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under TRITON_INTERPRET=1")
    p.add_argument("--out", default=None, help="report (default results/bench/gpu-triton.md; .json beside it)")
    p.add_argument("--lengths", type=int, nargs="+", help="default 8192 15360 (smoke: 64)")
    p.add_argument("--budget-s", type=float, default=480.0, help="cells left when this much wall time has passed "
                   "are skipped")
    args = p.parse_args(argv)
    args.device = "cpu" if args.smoke else "cuda"
    args.lengths = args.lengths or ([64] if args.smoke else [8192, 15360])
    args.out = args.out or str(ROOT / "results" / "bench" / f"gpu-triton{'_smoke' if args.smoke else ''}.md")
    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA device: the XXL shape needs a GPU (--smoke exercises the script on the CPU)", file=sys.stderr)
        return 2
    bench = Bench(args)
    run(bench)
    print(Path(args.out).read_text())
    return 0 if all(c["status"] in ("ok", "skipped: budget") for c in bench.cells) else 1


if __name__ == "__main__":
    sys.exit(main())
