"""scripts/bench/gpu/bench_gpu.py item 3: Algorithm 1 (paper A §4) at the Flan-T5-XL shape, from an L_tr reference to the
longest length, by grid and by bisection with statistics of every 16th row (measured), and one pass over every row
from which the paper profile's searches are projected (docs/gpu.md)."""

from __future__ import annotations

from typing import Any

import torch
from bench_gpu_models import L_TR, OURS_STATS, RESERVE_S, T5_BASE, random_ids, t5_encoder

from lengthx.alignment.algorithm1 import CalibrationOptions, calibrate, find_s
from lengthx.attention.t5_bias import enable_efficient_t5
from lengthx.models import LoadedModel, get_family


class Algorithm1Timing:
    """Item 3, a part of :class:`bench_gpu.Bench`."""

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
