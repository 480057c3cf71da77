#!/usr/bin/env python
"""How Algorithm 1's τ moves with its calibration draw, on the shipped first-of-K stand-in (docs/mini-t5-study.md,
"The first-of-K stand-in"; docs/results-paper-a.md).

For each count K, length and paper rule (P_max, H), Algorithm 1 runs on several calibration draws: the study's own
(``calibration.seed_offset`` 100003 at task seed 0) and others at other offsets, each with the study's two
calibration records. Only τ is computed (``Runner.aligned_temperature_with_source``, cached under
``<results>/calibration``); no evaluation runs. The table is written to ``<results>/tau_draws.md``.

    python scripts/studies/study_tau_draws.py                      # resumable: cached draws are read back
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

OFFSETS = (100003, 200003, 300003)  # the first is the study's draw
LENGTHS = (2560, 7424)  # 10x and 29x L_tr = 256
COUNTS = (1, 3, 5)
RULES = ("pmax",)  # H picks the same τ as P_max in most of the study's cells


def tau_of(snapshot: Path, results: Path, k: int, length: int, rule: str, offset: int) -> tuple[float, bool]:
    """(τ, whether the grid's end was reached short of the target) of one draw."""
    from lengthx.core.cells import Cell, method_id
    from lengthx.core.runner import Runner
    from lengthx.core.store import SHORT_OF_TARGET
    from lengthx.models.minis import compose_run

    cfg = compose_run(["model=mini-t5", f"model.path={snapshot}", "model.l_tr=256", "task=topics", "task.format=short",
                       f"task.num_topics={k}", f"method={rule}", f"task.settings=[{length}]", "task.unit=tokens",
                       "task.num_examples=60", "calibration.num_examples=2", f"calibration.seed_offset={offset}",
                       f"results_dir={results}", "device=cpu"])
    runner = Runner(cfg)
    (setting,) = runner.settings()
    cell = Cell(cfg.model.name, method_id(cfg.method), "topics", setting)
    tau, _, _ = runner.aligned_temperature_with_source(cell)
    return float(tau), runner.alignment_note(cell) == SHORT_OF_TARGET


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--snapshot", type=Path, default=Path("lengthx/checkpoints/mini-t5"))
    p.add_argument("--results", type=Path, default=Path("results/mini-t5-counts/tau-draws"))
    args = p.parse_args()
    rows = []
    for length in LENGTHS:
        for k in COUNTS:
            for rule in RULES:
                taus = [tau_of(args.snapshot, args.results, k, length, rule, o) for o in OFFSETS]
                rows.append((length, k, rule, taus))
                print(length, k, rule, taus, flush=True)
    head = " | ".join(f"draw {i + 1}{' (study)' if i == 0 else ''}" for i in range(len(OFFSETS)))
    lines = ["# Algorithm 1's τ over calibration draws (shipped mini-t5, topics in the short format, K conversations)",
             "", "Two calibration records per draw, as the study; draw i uses calibration.seed_offset "
             f"{', '.join(map(str, OFFSETS))} at task seed 0. `*`: τ at the grid's end (0.50) short of S̄_tr(1).", "",
             f"| L_ex | K | rule | {head} | spread |", "|---|---|---|" + "---|" * (len(OFFSETS) + 1)]
    for length, k, rule, taus in rows:
        cells = " | ".join(f"{t:.2f}{'*' if s else ''}" for t, s in taus)
        spread = max(t for t, _ in taus) - min(t for t, _ in taus)
        lines.append(f"| {length} ({length // 256}x) | {k} | {'P_max' if rule == 'pmax' else 'H'} | {cells} | "
                     f"{spread:.2f} |")
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "tau_draws.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
