"""scripts/bench/gpu/bench_gpu_cells.py's report: the JSON (meta, every cell, and the passes ``lengthx plan profile=paper
--estimate`` reads, lengthx/core/estimate.py) and the Markdown tables of docs/gpu.md's "Every paper model's largest
cell"."""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from typing import Any

import torch

STEP_TOKENS = 8  # decoder steps timed beyond the first (the estimate's decoder_step)


def report_data(cells: list[Any], args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The JSON: meta, every cell, and ``passes`` in ``estimate_costs.json``'s layout (kind → shape → length →
    seconds), the shape of a T5 v1.1 model being its size (``lengthx.core.estimate.PAPER_SHAPES``; of two models of
    one shape at one length, the first measured)."""
    import transformers

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    rows = [asdict(c) for c in cells]
    how = {"encoder": "one encoder (decoder-only: prefill) pass of the random-weight model at the paper model's "
                      "shape, batch 1, loaded as lengthx run loads it",
           "decoder_step": f"(generate {1 + STEP_TOKENS} tokens - generate 1) / {STEP_TOKENS}",
           "decoder_pass": "a scoring forward (128 target tokens) minus the encoder pass",
           "stats": "one statistics pass (capture_stats) at the paper profile's row stride"}
    return {"device": f"{name} (bench_gpu_cells{', smoke' if args.smoke else ''})", "measured_by":
            "scripts/bench/gpu/bench_gpu_cells.py", "how": how, "passes": passes_of(rows),
            "meta": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
                     "transformers": transformers.__version__, "smoke": args.smoke, "budget_s": args.budget_s},
            "cells": rows}


def passes_of(cells: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """``passes`` of the JSON from its cells: kind → shape → length → seconds."""
    from lengthx.core.estimate import PAPER_SHAPES

    passes: dict[str, dict[str, dict[str, float]]] = {}
    for c in cells:
        r, shape = c["result"], PAPER_SHAPES.get(c["model"], c["model"])
        for kind, key in (("encoder", "encoder_s"), ("decoder_step", "decoder_step_s"),
                          ("decoder_pass", "decoder_pass_s")):
            if (r.get(key) or 0) > 0:  # a difference lost in the jitter (None or 0) is no cost
                passes.setdefault(kind, {}).setdefault(shape, {}).setdefault(str(c["length"]), r[key])
        stats = r.get("stats") or {}
        if stats.get("time_s") is not None:
            passes.setdefault(f"stats/{stats['row_stride']}", {}).setdefault(shape, {}).setdefault(
                str(c["length"]), stats["time_s"])
    return passes


def cell_key(cell: dict[str, Any]) -> tuple[str, str, str, int]:
    """What identifies a cell across calls: model, paper, task (or training run) and length."""
    return cell["model"], cell["paper"], cell["task"], cell["length"]


def measured(result: dict[str, Any]) -> bool:
    """Whether a call measured the cell (or saw it fail), as opposed to skipping it for its budget."""
    return result.get("status", "skipped: budget") != "skipped: budget"


def merge_reports(reports: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Several calls' JSONs as one report: every cell any call lists (the first's order, then cells new in later
    calls), each with the last result for it (model, paper, task, length) that no budget skipped, and the device
    that measured it (``result["device"]``). GPUs of several calls may differ (each row names its own); a CPU
    smoke report never merges with another device's."""
    devices = {r.get("device") for _, r in reports}
    if len(devices) > 1 and any(str(d).startswith("CPU") for d in devices):
        raise ValueError("the reports were measured on different devices, one of them a CPU ("
                         + "; ".join(f"{n}: {r.get('device')}" for n, r in reports)
                         + "): a smoke run's timings never stand beside a GPU's. Fix: merge the GPU reports only")

    def own(cell: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
        return {**cell, "result": {**cell["result"], "device": cell["result"].get("device") or report.get("device")}}

    first = reports[0][1]
    data = {**first, "cells": [own(c, first) for c in first["cells"]]}
    at = {cell_key(c): c for c in data["cells"]}
    for _, other in reports[1:]:
        for c in other["cells"]:
            if cell_key(c) not in at:
                at[cell_key(c)] = own(c, other)
                data["cells"].append(at[cell_key(c)])
            elif measured(c["result"]):
                at[cell_key(c)]["result"] = own(c, other)["result"]
    data["device"] = " and ".join(sorted({str(c["result"]["device"]) for c in data["cells"]
                                          if measured(c["result"])} or devices))
    data["passes"] = passes_of(data["cells"])
    data["meta"] = {**reports[-1][1]["meta"], "budget_s": sum(r["meta"]["budget_s"] for _, r in reports),
                    "merged_from": [n for n, _ in reports]}
    return data


def _fmt(x: Any, spec: str = "{:.2f}") -> str:
    return "n/a" if x is None else spec.format(x) if isinstance(x, int | float) else str(x)


def render(data: dict[str, Any]) -> str:
    """The Markdown report: one row per model and paper."""
    meta = data["meta"]
    out = [f"# Every paper model's largest cell on one card{' (smoke: tiny configurations)' if meta['smoke'] else ''}",
           "", f"`scripts/bench/gpu/bench_gpu_cells.py` on {data['device']}, {meta['date']}; torch {meta['torch']}, "
           f"transformers {meta['transformers']}, budget {meta['budget_s']:.0f} s"
           f"{' over ' + str(len(meta['merged_from'])) + ' calls (' + ', '.join(meta['merged_from']) + ')' if meta.get('merged_from') else ''}. Random weights at each model's "
           "real configuration, its real tokenizer's vocabulary size; time per example includes building the "
           "examples (paper A) and is per training sequence at the profile's micro-batch (paper B); peak = "
           "`torch.cuda.max_memory_allocated` over the run, weights included.", ""]
    for paper, title, head in (("A", "Paper A: `lengthx run`, method none, the longest setting",
                                "| model | params | task | L_ex tokens | new tokens | examples | s / example | peak GiB | "
                                "fits | Algorithm 1 statistics pass: s, peak GiB | load s | device |"),
                               ("B", "Paper B: `lengthx train`, the longest run", "| model | params | run | "
                                "tokens / sequence | batch | steps | s / sequence | tokens/s | peak GiB | fits | device |")):
        out += [f"## {title}", "", head, "|" + "---|" * head.count(" | ") + "---|"]
        for c in (c for c in data["cells"] if c["paper"] == paper):
            r = c["result"]
            where = str(r.get("device") or data["device"]).replace(" (bench_gpu_cells)", "") if measured(r) else ""
            status = r.get("status", "not run")
            fits = "yes" if r.get("fits") else "no (OOM)" if status == "oom" else status if status != "ok" else \
                f"no (offloaded to {', '.join(r.get('offloaded') or [])})"
            if r.get("error"):
                fits += f": {r['error']}"
            n = r.get("params") or 0
            p = f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.1f}M" if n else ""
            if paper == "A":
                s = r.get("stats") or {}
                st = "" if not s else f"{_fmt(s.get('time_s'))} s, {_fmt(s.get('peak_gib'))}" if \
                    s.get("status", "ok") == "ok" else f"{s['status']}: {s.get('error', '')}"
                out.append(f"| {c['model']} | {p} | {c['task']} | {c['length']} | {c['new_tokens']} | "
                           f"{r.get('examples', '')} | {_fmt(r.get('per_example_s'))} | {_fmt(r.get('peak_gib'))} | "
                           f"{fits} | {st} | {_fmt(r.get('load_s'), '{:.0f}')} | {where} |")
            else:
                out.append(f"| {c['model']} | {p} | {c['task']} | {c['length']} | {r.get('batch', '')} | "
                           f"{r.get('steps', '')} | {_fmt(r.get('per_example_s'), '{:.3f}')} | "
                           f"{_fmt(r.get('tokens_s'), '{:,.0f}')} | {_fmt(r.get('peak_gib'))} | {fits} | {where} |")
        out.append("")
    return "\n".join(out)
