"""Dispersal statistics of paper A (§3.3, §7): what ``lengthx stats`` measures and stores.

For each setting of a task, and for length-L_tr examples of the same task, one τ = 1 pass over the
calibration examples gives: the mean P_max and entropy over all encoder layers and heads (Table 1), and
layer 0's average logit vector — σ, l_max (Table 7) and QQ quantiles (Figures 2/5) — plus layer 0's mean
P_max (Prop. 1's P_tr). These become result rows with method ``stats``; QQ quantiles and the learned bias
b_{m,n} of every head (Figure 1) go to ``<results_dir>/stats/<model>__<task>.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from lengthx.alignment import capture_stats
from lengthx.positions import t5_relative_bucket
from lengthx.results import git_commit, now, safe_name, versions
from lengthx.tasks import Setting

STAT_METRICS = ("attn_pmax", "attn_entropy", "l0_pmax", "l0_sigma", "l0_lmax")
QQ_POINTS = 200


def learned_bias(model: torch.nn.Module, length: int) -> torch.Tensor:
    """b_{m,n} of every encoder head for m = length // 2 and n = 0…length−1 (paper A Figure 1): (H, length)."""
    attn = model.encoder.block[0].layer[0].SelfAttention
    m = length // 2
    rel = torch.arange(length) - m  # key − query, transformers' convention
    buckets = t5_relative_bucket(rel, True, attn.relative_attention_num_buckets, attn.relative_attention_max_distance)
    return attn.relative_attention_bias.weight.detach().float().cpu()[buckets].T


def setting_statistics(runner: Any, setting: Setting) -> tuple[dict[str, float], dict[str, list[float]], float]:
    """Statistics at τ = 1 over the calibration examples of ``setting``: (metrics, QQ data, mean length)."""
    from lengthx.runner import encode

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


def run_statistics(runner: Any) -> list[dict[str, Any]]:
    """Measure every setting plus L_tr; append rows (method ``stats``) and write the JSON side file."""
    from lengthx.runner import Cell, cell_hash

    store, cfg = runner.store, runner.cfg
    settings = [Setting("L_tr", runner.loaded.l_tr, "tokens"), *runner.settings()]
    side_path = Path(cfg.results_dir) / "stats" / safe_name(f"{cfg.model.name}__{runner.task.name}.json")
    side = json.loads(side_path.read_text()) if side_path.exists() else {"qq": {}}
    if runner.loaded.family.name == "t5":
        side["bias"] = learned_bias(runner.loaded.model, max(s.value for s in settings)).tolist()
    summary = []
    for setting in settings:
        cell = Cell(cfg.model.name, "stats", runner.task.name, setting)
        chash = cell_hash(cfg, setting, runner.weights)
        if store.is_done(cell.key, chash) and setting.label in side["qq"]:
            summary.append({"cell": cell.key, "status": "done"})
            continue
        start = time.time()
        metrics, qq, l_ex = setting_statistics(runner, setting)
        side["qq"][setting.label] = {**qq, "L_ex": l_ex}
        base = {"paper": "A", "table": "1", "model": cell.model, "method": "stats", "task": cell.task,
                "setting": setting.label, "n": int(cfg.calibration.num_examples), "tau": 1.0,
                "L_tr": runner.loaded.l_tr, "L_req": setting.value if setting.unit == "tokens" else "",
                "L_ex": round(l_ex, 1), "seed": cfg.task.seed, "status": "ok", "cell": cell.key,
                "config_hash": chash, "git_commit": git_commit(), "versions": versions(),
                "device": str(runner.loaded.device), "seconds": round(time.time() - start, 2), "timestamp": now()}
        store.append_rows([{**base, "metric": k, "value": round(v, 6)} for k, v in metrics.items()], cell.key, chash)
        side_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = side_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(side))
        tmp.replace(side_path)
        summary.append({"cell": cell.key, "status": "ok", "value": round(metrics["attn_pmax"], 4)})
    return summary
