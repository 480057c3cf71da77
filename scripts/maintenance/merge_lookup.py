"""Merge what a GPU call trained of the lookup study (docs/gpu.md, "The lookup study on a GPU";
``scripts/gpu_runs/gpu_lookup.sh``) into ``results/mini-t5-lookup``: per variant, the returned resume point and
curve where they are further on than this checkout's, and every returned snapshot this checkout lacks (with the
shipped mini-t5's tokenizer, which the call leaves out).

A variant's own ``state.pt`` here (not committed) is older than the returned resume point once that is merged, and
a run resumes from ``state.pt`` first, so it is moved aside to ``state.pt.before-<step>``. A variant whose
``state.pt`` changed in the last ``--busy-minutes`` (a trainer running here) is refused: stop it, then merge.

    python scripts/maintenance/merge_lookup.py <files_at>/lookup.tar.gz [results/mini-t5-lookup]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "lengthx" / "checkpoints" / "mini-t5"


def step_of(run: Path) -> int:
    """The step a run directory resumes at: its ``state.pt``, else its ``resume.pt``, else 0."""
    for name in ("state.pt", "resume.pt"):
        if (run / name).is_file():
            return int(torch.load(run / name, map_location="cpu", weights_only=True)["state"]["step"])
    return 0


def merge(archive: Path, study: Path, busy_minutes: float = 5.0) -> list[str]:
    """Merge ``archive`` into ``study``; one line per variant saying what was done."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        back = Path(tmp)
        for run in sorted((back / "train").glob("*/")):
            v, here = run.name, study / "train" / run.name
            if not (run / "resume.pt").is_file():
                lines.append(f"{v}: no resume point came back; nothing merged")
                continue
            state = here / "state.pt"
            if state.is_file() and time.time() - state.stat().st_mtime < 60 * busy_minutes:
                raise SystemExit(f"{state} changed in the last {busy_minutes:g} minutes: a trainer is running on "
                                 f"{v} here. Fix: stop it (its state is saved every few minutes), then merge again")
            new, old = step_of(run), step_of(here)
            if new <= old:
                lines.append(f"{v}: the call's step {new} is not past this checkout's {old}; kept this checkout's")
            else:
                here.mkdir(parents=True, exist_ok=True)
                if state.is_file():
                    state.rename(here / f"state.pt.before-{old}")
                for name in ("resume.pt", "curve.json"):
                    shutil.copy2(run / name, here / name)
                lines.append(f"{v}: step {old} -> {new}")
            for snap in sorted((back / "snapshots" / v).glob("step-*/")):
                target = study / "snapshots" / v / snap.name
                if (target / "README.md").is_file():
                    continue
                shutil.copytree(snap, target, dirs_exist_ok=True)
                for tok in TOKENIZER.glob("tokenizer*"):
                    shutil.copy2(tok, target / tok.name)
                lines.append(f"{v}: snapshot {snap.name} added")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("archive", type=Path)
    p.add_argument("study", type=Path, nargs="?", default=ROOT / "results" / "mini-t5-lookup")
    p.add_argument("--busy-minutes", type=float, default=5.0)
    args = p.parse_args()
    if not args.archive.is_file():
        sys.exit(f"{args.archive}: no such archive. Fix: the lookup.tar.gz a gpu_lookup.sh call returned")
    for line in merge(args.archive, args.study, args.busy_minutes):
        print(line)


if __name__ == "__main__":
    main()
