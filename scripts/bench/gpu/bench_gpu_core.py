"""scripts/bench/gpu/bench_gpu.py's run: device, time budget, one guarded cell at a time (an out-of-memory, a stop at the budget
or an error is the cell's row), timing and GPU memory, and the report rewritten after every cell (docs/gpu.md)."""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from bench_gpu_models import LENGTHS, SHAPES, SMOKE_LENGTHS, SMOKE_SHAPES, Variant
from bench_gpu_report import render

from lengthx.attention import stats_backend, tiled_softmax
from lengthx.attention.t5_bias import triton_kernel


def free_device(device: torch.device) -> None:
    """Collect garbage and, on CUDA, empty the cache and restart the peak-memory count, so the next measurement
    starts from the weights alone."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def timed(device: torch.device, fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of ``fn``: CUDA events on a GPU, ``perf_counter`` on the CPU."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        res = fn()
        return time.perf_counter() - t0, res
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    res = fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000, res


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



class BenchCore:
    """The run: device, budget, results (one dict per cell) and the report, rewritten after every cell; ``t0``:
    when the budget started (before torch was imported)."""

    def __init__(self, args: argparse.Namespace, t0: float | None = None):
        self.args = args
        self.t0 = time.monotonic() if t0 is None else t0
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
        self.meta["stats_auto"] = stats_backend.describe(self.device)
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
        free_device(self.device)

    def allocated(self) -> float | None:
        return torch.cuda.memory_allocated(self.device) / 2**30 if self.cuda else None

    def peak(self) -> float | None:
        return torch.cuda.max_memory_allocated(self.device) / 2**30 if self.cuda else None

    def timed(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        return timed(self.device, fn)

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
        if getattr(self.args, "variants", None) and v.name not in self.args.variants:
            return "not asked for (--variants)"
        if v.flex and not tiled_softmax.flex_available():
            return "n/a (no FlexAttention in this torch)"
        if v.flex and not self.cuda and not self.args.cpu_flex:
            return "n/a (CUDA only)"
        if v.stats_backend == "triton":
            try:
                kernel = triton_kernel()
            except ValueError:
                return "n/a (no triton)"
            if not kernel.supported(self.device):
                return "n/a (CUDA only)"
        return None
