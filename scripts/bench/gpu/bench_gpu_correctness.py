"""scripts/bench/gpu/bench_gpu.py item 2: correctness on the device. Each efficient path's encoder output and per-(layer, head)
P_max and entropy (paper A §4's statistics) against the explicit softmax over the dense bias in bf16, within three
times that reference's own bf16 error against fp32 (docs/gpu.md)."""

from __future__ import annotations

from typing import Any

import torch
from bench_gpu_models import (
    EXPLICIT,
    OURS_BLOCKS,
    OURS_FLEX,
    OURS_SDPA,
    OURS_STATS,
    OURS_TRITON,
    RESERVE_S,
    STOCK,
    T5_BASE,
    TOL_FACTOR,
    configure,
    encode,
    encoder_modules,
    random_ids,
    t5_encoder,
)

from lengthx.attention.stats import AttentionStats
from lengthx.attention.temperature import clear_temperature, set_temperature


class Correctness:
    """Item 2, a part of :class:`bench_gpu.Bench`."""

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
            for v in (OURS_SDPA, OURS_FLEX, OURS_STATS, OURS_TRITON, OURS_BLOCKS, STOCK):
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


def _summary(out: torch.Tensor, stats: AttentionStats | None) -> dict[str, torch.Tensor | None]:
    return {"out": out.float().cpu(), "pmax": None if stats is None else stats.pmax().float(),
            "entropy": None if stats is None else stats.entropy().float()}


def _errors(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
    """Max abs difference of the encoder output and of the per-(layer, head) P_max and entropy."""
    return {k: None if a[k] is None or b[k] is None else float((a[k] - b[k]).abs().max())
            for k in ("out", "pmax", "entropy")}
