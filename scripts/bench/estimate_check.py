"""The mini profile's cost estimate against a real run on this CPU (docs/design.md §12).

1. Measures mini-t5's passes on this CPU, one thread, through lengthx's attention (as ``lengthx run`` computes
   them) at the lengths of the checked sweep: an encoder pass, a decoder step, and a statistics pass at the mini
   profile's row stride (Algorithm 1's unit of work); writes them to ``results/bench/estimate_costs.json``, the
   costs ``lengthx plan profile=mini … --estimate`` reads.
2. Estimates the sweep as ``lengthx plan --estimate`` does.
3. Runs the sweep for real (``lengthx run -m …``, a temporary results directory) and times it.
4. Writes ``results/bench/estimate_check.md``: estimate, measured, their ratio.

    python scripts/bench/estimate_check.py [--examples 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "bench"
REPEATS = 3


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def best_of(fn) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(cfg, lengths: list[int], new_tokens: int) -> dict[str, dict[str, dict[str, float]]]:
    """Seconds per pass of the job's model (loaded as ``lengthx run`` loads it: its attention settings) at each
    length: an encoder pass, a decoder step (generating 1 + new_tokens tokens minus 1 token, per step), and a
    statistics pass at the profile's row stride (Algorithm 1's unit: :func:`capture_stats`)."""
    import torch

    from lengthx.alignment.statistics import capture_stats
    from lengthx.models.loading import load_model

    torch.set_num_threads(1)
    stride = int(cfg.calibration.row_stride)
    loaded = load_model(cfg.model, device="cpu", dtype=str(cfg.dtype), attention=cfg.get("attention"))
    model, name = loaded.model, str(cfg.model.name)
    passes: dict[str, dict[str, dict[str, float]]] = {"encoder": {}, "decoder_step": {}, f"stats/{stride}": {}}
    for length in lengths:
        g = torch.Generator().manual_seed(length)
        batch = {"input_ids": torch.randint(5, model.config.vocab_size - 1, (1, length), generator=g),
                 "attention_mask": torch.ones(1, length, dtype=torch.long)}

        def generate(k: int, batch=batch) -> None:
            model.generate(**batch, max_new_tokens=k, min_new_tokens=k, do_sample=False)

        with torch.inference_mode():
            encoder = best_of(lambda batch=batch: model.encoder(**batch))
            step = max(0.0, best_of(lambda: generate(1 + new_tokens)) - best_of(lambda: generate(1))) / new_tokens
        stats = best_of(lambda batch=batch: capture_stats(loaded, [batch], 1.0, "encoder", row_stride=stride))
        passes["encoder"].setdefault(name, {})[str(length)] = round(encoder, 5)
        passes["decoder_step"].setdefault(name, {})[str(length)] = round(step, 6)
        passes[f"stats/{stride}"].setdefault(name, {})[str(length)] = round(stats, 5)
        print(f"{length:6d} tokens: encoder {encoder:.3f} s, decoder step {step:.4f} s, statistics {stats:.3f} s",
              flush=True)
    return passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from lengthx.cli.estimate import estimate_totals
    from lengthx.cli.run import plan_jobs
    from lengthx.core.estimate import cpu_costs

    sweep = ["experiment=aa_table4", "task=passkey", "method=none,pmax", f"task.num_examples={args.examples}",
             "calibration.num_examples=1"]
    _, jobs = plan_jobs(sweep, show=False)
    cfg = jobs[0][1]
    lengths = sorted({int(c.setting.value) for _, _, cells, _ in jobs for c in cells} | {int(cfg.model.l_tr)})
    stride = int(cfg.calibration.row_stride)
    passes = measure(cfg, lengths, int(cfg.task.max_new_tokens))
    how = {"encoder": "mini-t5's encoder loaded as lengthx run loads it, batch 1, best of 3",
           "decoder_step": "mini-t5 generating 1 + max_new_tokens tokens minus 1 token, per step, best of 3",
           "stats": f"one statistics pass (capture_stats) at row stride {stride}, best of 3"}
    costs_file = OUT / "estimate_costs.json"
    costs_file.write_text(json.dumps({"device": f"{cpu_name()} (1 thread)", "measured_by": "scripts/bench/estimate_check.py",
                                      "how": how, "passes": passes}, indent=1) + "\n")
    total = estimate_totals(jobs, cpu_costs(costs_file))["total"]
    with tempfile.TemporaryDirectory(prefix="lengthx-estimate-check-") as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        command = [sys.executable, "-m", "lengthx.cli", "run", "-m", *sweep, f"results_dir={tmp}/results"]
        t0 = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        measured = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"the run failed:\n{proc.stderr[-3000:]}")
    ratio = total.seconds / measured
    lines = [
        "# The mini estimate against a real mini run", "",
        f"Generated by `scripts/bench/estimate_check.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"{cpu_name()}, one thread (OMP_NUM_THREADS=1), Python {platform.python_version()}.", "",
        f"Sweep: `lengthx run -m {' '.join(sweep)}` ({total.cells} cells, {total.examples} examples, "
        f"{total.passes.get('encoder', 0)} encoder passes, {total.passes.get('decoder_step', 0)} decoder steps at "
        f"most, {total.passes.get('stats', 0)} statistics passes).", "",
        "| estimate s (`lengthx plan profile=mini … --estimate`) | measured s (the run, wall) | estimate / measured |",
        "|---:|---:|---:|",
        f"| {total.seconds:.1f} | {measured:.1f} | {ratio:.2f} |", "",
        "The estimate costs the passes alone; the run also starts two processes (one per job), loads the model, "
        "builds and hashes the examples and writes the records. Costs per pass: `results/bench/estimate_costs.json`.",
        f"Within 2x: {'yes' if 0.5 <= ratio <= 2.0 else 'NO'}.",
    ]
    (OUT / "estimate_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
