"""Why FlexAttention over the offset table is slower than SDPA over its view (docs/gpu.md, "Why not FlexAttention").

On the H200 (``results/bench/gpu-h200.md``) ``lengthx-flex`` took stock SDPA's time, 6-8x lengthx's SDPA over the
zero-copy bias view. This script times one encoder attention call at the Flan-T5-XXL shape (64 heads × 64, bf16,
batch 1, τ = 0.7, paper A §3) in four ways, then runs the profiler over each:

- ``sdpa-view``: lengthx's default, ``RelativeBiasTable.attend`` with SDPA over the view (as the encoder runs it);
- ``flex``: lengthx's FlexAttention path (``attention.backend=flex``: ``score_mod`` adds T[h, j − i + L − 1]);
- ``flex-nobias``: the same compiled FlexAttention with ``score_mod`` dividing by τ only, no table read: what
  the kernel costs without the per-score gather;
- ``sdpa-nobias``: SDPA with no bias at all (the flash kernel), the floor.

For each: the median call time (CUDA events, after warm-up and compilation), the dynamo graphs compiled during
the timed calls (0 = no recompilation), the profiler's total device time per call, and its five most expensive
kernels. Written to ``results/bench/gpu-flex.md`` and ``.json``; ``--smoke`` runs it on the CPU at a tiny shape
(no FlexAttention there unless ``--cpu-flex``).

    python scripts/bench/gpu/profile_gpu_flex.py            # on a GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
for _entry in (ROOT, ROOT / "scripts" / "bench", ROOT / "scripts" / "bench" / "gpu"):
    if str(_entry) not in sys.path:
        sys.path.insert(0, str(_entry))

import torch  # noqa: E402
from bench_gpu_core import free_device, timed  # noqa: E402
from bench_gpu_triton import TAU, call_fn  # noqa: E402

VARIANTS = ("sdpa-view", "flex", "flex-nobias", "sdpa-nobias")


def variant_fn(bench: Any, n: int, variant: str) -> Callable[[], Any]:
    """One attention call of ``variant`` at n tokens (the inputs of ``bench_gpu_triton.call_fn``)."""
    if variant in ("sdpa-view", "flex"):
        return call_fn(bench, n, {"sdpa-view": "sdpa", "flex": "flex"}[variant])
    from torch.nn.attention.flex_attention import flex_attention

    h, d = (4, 16) if bench.args.smoke else (64, 64)
    g = torch.Generator(device=bench.device).manual_seed(0)
    q, k, v = (torch.randn(1, n, h, d, generator=g, device=bench.device, dtype=torch.bfloat16).transpose(1, 2)
               for _ in range(3))
    if variant == "sdpa-nobias":
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0 / TAU)
    compiled = torch.compile(flex_attention, dynamic=False)
    inv_tau = torch.tensor(1.0 / TAU, device=bench.device, dtype=torch.bfloat16)

    def score_mod(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 - FlexAttention's callback signature
        return score * inv_tau

    return lambda: compiled(q, k, v, score_mod=score_mod, scale=1.0)


def profile_cell(bench: Any, n: int, variant: str) -> dict[str, Any]:
    """Warm-up (compiles), the median of 5 timed calls, graphs compiled meanwhile, then 3 profiled calls."""
    from torch._dynamo.utils import counters
    from torch.profiler import ProfilerActivity, profile

    fn = variant_fn(bench, n, variant)
    t0 = time.monotonic()
    with torch.inference_mode():
        fn()
        first_s = time.monotonic() - t0
        graphs = counters["stats"]["unique_graphs"]
        times = [timed(bench.device, fn)[0] for _ in range(5)]
        recompiled = counters["stats"]["unique_graphs"] - graphs
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if bench.device.type == "cuda" else [])
        with profile(activities=acts) as prof:
            for _ in range(3):
                fn()
            if bench.device.type == "cuda":
                torch.cuda.synchronize()
    attr = "self_device_time_total" if bench.device.type == "cuda" else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, attr, 0) > 0]
    kernels = [e for e in events if bench.device.type != "cuda" or e.device_type.name == "CUDA"]
    kernels.sort(key=lambda e: getattr(e, attr), reverse=True)
    total_ms = sum(getattr(e, attr) for e in kernels) / 1000 / 3
    top = [{"name": e.key[:90], "calls": e.count // 3, "ms_per_call": getattr(e, attr) / 1000 / 3}
           for e in kernels[:5]]
    return {"time_s": statistics.median(times), "times": times, "first_call_s": first_s, "recompiled": recompiled,
            "device_ms_per_call": total_ms, "top": top}


class Bench:
    """What ``call_fn`` reads: ``args.smoke`` and ``device``."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.device = args, torch.device(args.device)


def render(data: dict[str, Any]) -> str:
    m = data["meta"]
    out = ["# FlexAttention over the offset table, profiled" + (" (smoke: CPU, tiny shape)" if m["smoke"] else ""),
           "", f"`scripts/bench/gpu/profile_gpu_flex.py` on {m['device']}, {m['date']}; torch {m['torch']}. One encoder "
           f"attention call, {m['heads']} heads × {m['d']}, bf16, batch 1, τ = {TAU}; time = median of 5 (CUDA "
           "events, after warm-up and compilation); device time = the profiler's kernel time per call.", "",
           "| L | variant | time ms | × sdpa-view | first call s | graphs compiled while timed | device ms / call | "
           "most expensive kernels (ms per call) |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for c in data["cells"]:
        if c["status"] != "ok":
            out.append(f"| {c['length']} | {c['variant']} | {c['status']}: {c.get('error', '')} | | | | | |")
            continue
        base = next((b for b in data["cells"] if b["length"] == c["length"] and b["variant"] == "sdpa-view"
                     and b["status"] == "ok"), None)
        ratio = f"{c['time_s'] / base['time_s']:.2f}x" if base else ""
        tops = "; ".join(f"`{t['name']}` ×{t['calls']} {t['ms_per_call']:.2f}" for t in c["top"])
        out.append(f"| {c['length']} | {c['variant']} | {c['time_s'] * 1000:.2f} | {ratio} | {c['first_call_s']:.1f} "
                   f"| {c['recompiled']} | {c['device_ms_per_call']:.2f} | {tops} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="CPU, tiny shape (FlexAttention only with --cpu-flex)")
    p.add_argument("--cpu-flex", action="store_true", help="with --smoke: compile FlexAttention on the CPU too")
    p.add_argument("--lengths", type=int, nargs="+", default=None, help="default 8192 (smoke: 64)")
    p.add_argument("--out", default=str(ROOT / "results" / "bench" / "gpu-flex.md"))
    args = p.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print("error: no CUDA device. Fix: run on a GPU, or --smoke", file=sys.stderr)
        return 2
    args.device = "cpu" if args.smoke else "cuda"
    bench = Bench(args)
    cells: list[dict[str, Any]] = []
    name = torch.cuda.get_device_name() if bench.device.type == "cuda" else "CPU"
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": name, "torch": torch.__version__,
            "smoke": args.smoke, "heads": 4 if args.smoke else 64, "d": 16 if args.smoke else 64}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for n in args.lengths or ([64] if args.smoke else [8192]):
        for variant in VARIANTS:
            cell: dict[str, Any] = {"length": n, "variant": variant}
            if variant.startswith("flex") and args.smoke and not args.cpu_flex:
                cell["status"] = "n/a (CPU without --cpu-flex)"
            else:
                try:
                    cell.update(profile_cell(bench, n, variant), status="ok")
                except Exception as err:  # noqa: BLE001 - a failing variant is a row
                    traceback.print_exc(limit=4)
                    cell.update(status="error", error=f"{type(err).__name__}: {str(err).splitlines()[0][:160]}")
            free_device(bench.device)
            cells.append(cell)
            data = {"meta": meta, "cells": cells}
            out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
            out.write_text(render(data))
    print(out.read_text())
    return 0 if all(c["status"] != "error" for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
