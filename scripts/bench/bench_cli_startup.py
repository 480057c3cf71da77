"""Benchmark of the ``lengthx`` command's start-up: how long ``--help``, ``ls``, ``run --help`` and a config
error take to answer, as a ratio to a bare ``python -c "import omegaconf"`` measured side by side.

Each command runs as a fresh process (``python -m lengthx.cli …``, what the ``lengthx`` script runs), from an
empty working directory, once per round; the rounds interleave the commands so that a busy machine slows
them alike. The table gives the minimum and the median over ``--rounds`` rounds and the ratio of each to the
baseline's. ``--compare-commit REV`` also runs the same commands on the package as it was at ``REV`` (a
``git archive`` of it on ``PYTHONPATH``), in the same rounds.

    python scripts/bench/bench_cli_startup.py                               # -> results/bench/cli_startup.md
    python scripts/bench/bench_cli_startup.py --compare-commit main~1       # … with the commit's numbers beside
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BASELINE = ("import omegaconf", ["-c", "import omegaconf"])
COMMANDS = (
    ("lengthx --help", ["--help"]),
    ("lengthx ls", ["ls"]),
    ("lengthx run --help", ["run", "--help"]),
    ("config error: lengthx run task.num_examples=0", ["run", "task.num_examples=0"]),
)


def timed(argv: list[str], cwd: Path, env: dict[str, str], expect_rc: int | None) -> float:
    """Wall-clock seconds of one process running ``argv`` to its end."""
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if expect_rc is not None and proc.returncode != expect_rc:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}, expected {expect_rc}: {proc.stderr[-500:]}")
    return seconds


def export_commit(rev: str, dest: Path) -> Path:
    """The tree of ``rev`` (git archive) unpacked under ``dest``; returns its root."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--compare-commit", default=None, help="also time the package as it was at this commit")
    p.add_argument("--out", default=str(ROOT / "results" / "bench" / "cli_startup.md"))
    args = p.parse_args()

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LENGTHX_DEBUG", "LENGTHX_CONF")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    trees = {"now": None}
    with tempfile.TemporaryDirectory(prefix="lengthx-bench-cli-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        if args.compare_commit:
            trees[args.compare_commit] = export_commit(args.compare_commit, Path(tmp) / "tree")
        rows: list[tuple[str, str, list[str], int | None]] = [("baseline", BASELINE[0], BASELINE[1], 0)]
        for tree in trees:
            for label, argv in COMMANDS:
                rows.append((tree, label, ["-m", "lengthx.cli", *argv], 2 if "error" in label else 0))
        times: dict[tuple[str, str], list[float]] = {(t, label): [] for t, label, _, _ in rows}
        for _ in range(args.rounds + 1):  # the first round warms the file cache and is not counted
            for tree, label, argv, rc in rows:
                run_env = dict(env)
                if trees.get(tree) is not None:
                    run_env["PYTHONPATH"] = str(trees[tree])
                times[(tree, label)].append(timed([sys.executable, *argv], work, run_env, rc))
        for key in times:
            times[key] = times[key][1:]

    base = times[("baseline", BASELINE[0])]
    base_min, base_med = min(base), statistics.median(base)
    lines = [
        "# CLI start-up",
        "",
        f"`python scripts/bench/bench_cli_startup.py{' --compare-commit ' + args.compare_commit if args.compare_commit else ''}`"
        f": each command a fresh process, {args.rounds} interleaved rounds (after one warm-up round), "
        f"Python {sys.version.split()[0]}, OMP_NUM_THREADS=1. Ratio = the command's time / the baseline's "
        '(`python -c "import omegaconf"`), of the minima and of the medians.',
        "",
        "| code | command | min (s) | median (s) | ratio of minima | ratio of medians |",
        "|---|---|---|---|---|---|",
    ]
    for tree, label, _, _ in rows:
        ts = times[(tree, label)]
        lo, med = min(ts), statistics.median(ts)
        lines.append(f"| {tree} | {label} | {lo:.3f} | {med:.3f} | {lo / base_min:.1f}x | {med / base_med:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
