"""scripts/bench/gpu/bench_gpu.py item 4: paper B (§3) at GPT-2 small's shape: training tokens/s and peak memory of ``full`` at
4·L_t against ``chunk-0.25`` and plain ``da`` at L_t, the same tokens per step (scripts/bench/bench_training_memory.py's
builder, batches and step; docs/gpu.md)."""

from __future__ import annotations

import argparse
from typing import Any

import torch
from bench_gpu_models import RESERVE_S, _median
from bench_training_memory import build_model, make_batches, train_step

from lengthx.segmented.loop import build_optimizer
from lengthx.segmented.models import prepare_for_length
from lengthx.segmented.sampling import SegmentMethod


class PaperBTraining:
    """Item 4, a part of :class:`bench_gpu.Bench`."""

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
