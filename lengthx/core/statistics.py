"""Dispersal statistics of paper A (§3.3, §7): what ``lengthx stats`` measures and stores.

For each setting of a task, and for length-L_tr examples of the same task, one τ = 1 pass over the
calibration examples gives: the mean P_max and entropy over all encoder layers and heads (Table 1), and
layer 0's average logit vector — σ, l_max (Table 7) and QQ quantiles (Figures 2/5) — plus layer 0's mean
P_max (Prop. 1's P_tr). These become result rows with method ``stats``; QQ quantiles and the learned bias
b_{m,n} of every head (Figure 1) go to ``<results_dir>/stats/<model>__<task>.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lengthx.alignment.statistics import QQ_POINTS, STAT_METRICS, capture_stats, learned_bias
from lengthx.core.cells import Cell
from lengthx.core.store import make_dirs, read_json, safe_name, write_atomic
from lengthx.core.sweep import row_fields, sweep
from lengthx.tasks import Setting


def setting_statistics(runner: Any, setting: Setting) -> tuple[dict[str, float], dict[str, list[float]], float]:
    """Statistics at τ = 1 over the calibration examples of ``setting``: (metrics, QQ data, mean length)."""
    from lengthx.models.generation import encode

    cal = runner.cfg.calibration
    offset = cal.reference_seed_offset if setting.label == "L_tr" else cal.seed_offset
    examples = runner.examples(setting, offset, int(cal.num_examples))
    batches = [encode(runner.loaded, [e.prompt]) for e in examples]
    stats = capture_stats(runner.loaded, batches, 1.0, runner.method.get("scope", "encoder"), logit_vector=True)
    metrics = {"attn_pmax": stats.mean("pmax"), "attn_entropy": stats.mean("entropy"),
               "l0_pmax": float(stats.pmax()[0].mean()), "l0_sigma": stats.logit_sigma(),
               "l0_lmax": stats.logit_lmax()}
    theo, sample = stats.logit_qq(QQ_POINTS)
    qq = {"theoretical": theo.tolist(), "sample": sample.tolist()}
    return metrics, qq, sum(e.actual_tokens for e in examples) / len(examples)


class StatisticsJob:
    """The cells of ``lengthx stats`` (method ``stats``) for one model and task (:class:`lengthx.core.sweep.CellJob`):
    every setting and the length-L_tr reference, with the JSON side file of QQ data and the learned bias."""

    first_metric = STAT_METRICS[0]

    def __init__(self, runner: Any):
        self.runner, cfg = runner, runner.cfg
        self.settings = [Setting("L_tr", runner.loaded.l_tr, "tokens"), *runner.settings()]
        self.side_path = Path(cfg.results_dir) / "stats" / safe_name(f"{cfg.model.name}__{runner.task.name}.json")
        self.side = read_json(self.side_path, required=("qq",)) or {"qq": {}}  # a damaged one is set aside
        if runner.loaded.family.name == "t5":
            self.side["bias"] = learned_bias(runner.loaded.model, max(s.value for s in self.settings)).tolist()

    def cells(self) -> list[tuple[Cell, str]]:
        cfg = self.runner.cfg
        return [(Cell(cfg.model.name, "stats", self.runner.task.name, setting), self.runner.cell_hash(setting))
                for setting in self.settings]

    def is_done(self, cell: Cell, chash: str) -> bool:
        return self.runner.store.is_done(cell.key, chash) and cell.setting.label in self.side["qq"]

    def row_fields(self, cell: Cell, chash: str, start: float) -> dict[str, Any]:
        cfg, loaded = self.runner.cfg, self.runner.loaded
        return row_fields(cell, chash, start, paper="A", table="1", l_tr=loaded.l_tr, seed=cfg.task.seed,
                          device=str(loaded.device), data=self.runner.data_source(cell.setting))

    def compute(self, cell: Cell, chash: str, start: float) -> list[dict[str, Any]]:
        setting = cell.setting
        metrics, qq, l_ex = setting_statistics(self.runner, setting)
        self.side["qq"][setting.label] = {**qq, "L_ex": l_ex}
        make_dirs(self.side_path.parent)
        write_atomic(self.side_path, json.dumps(self.side).encode())
        fields = {**self.row_fields(cell, chash, start), "n": int(self.runner.cfg.calibration.num_examples),
                  "tau": 1.0, "L_req": setting.value if setting.unit == "tokens" else "", "L_ex": round(l_ex, 1),
                  "status": "ok"}
        return [{**fields, "metric": k, "value": round(v, 6)} for k, v in metrics.items()]


def run_statistics(runner: Any) -> list[dict[str, Any]]:
    """Measure every setting plus L_tr through the one sweep loop; rows have method ``stats``."""
    job = StatisticsJob(runner)
    return sweep(runner.store, job)
