"""scripts/bench/gpu/bench_gpu.py item 1: paper A's Flan-T5-XXL-shaped encoder timed at 2k-15k tokens in every variant
(:mod:`bench_gpu_models`), with peak GPU memory, most important cells first and each within the budget (docs/gpu.md)."""

from __future__ import annotations

from typing import Any

import torch
from bench_gpu_models import (
    RESERVE_S,
    T5_BASE,
    WARM_TOKENS,
    Variant,
    _median,
    configure,
    encode,
    random_ids,
    t5_encoder,
)
from transformers import T5EncoderModel


class EncoderTiming:
    """Item 1, a part of :class:`bench_gpu.Bench`."""

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
