"""Benchmark of the commands that read ``results.csv`` at a lab's size (docs/results.md): ``lengthx tables
--summary``, ``lengthx tables`` and a ``lengthx run`` whose cells are all done, on the committed ``results/mini``
and on a copy grown to ``--rows`` rows (older configurations of the same cells, the committed rows last, so the
run still finds its cells done), side by side, one thread.

Each command runs as a fresh process once per round; the rounds interleave the sizes so that a busy machine
slows them alike. The table gives the median seconds of each at both sizes and their ratio (what the extra
rows cost). ``--compare-commit REV`` also times the package as it was at ``REV``.

    python scripts/bench_results_scale.py                            # -> results/bench/results_scale.md
    python scripts/bench_results_scale.py --compare-commit main~3    # … with the commit's numbers beside
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench_cli_startup import export_commit, timed

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results" / "mini"
COMMANDS = (
    ("tables --summary", lambda d: ["tables", "--summary", "--results-dir", str(d)]),
    ("tables", lambda d: ["tables", "--results-dir", str(d), "--out", str(d / "tables")]),
    ("run, every cell done", lambda d: ["run", "task=passkey", "method=none", "task.num_examples=60",
                                        f"results_dir={d}"]),
)


def grown_copy(dest: Path, rows: int) -> Path:
    """``results/mini`` copied to ``dest`` with ``results.csv`` grown to ``rows`` rows: copies of its rows under
    other configuration hashes first, its own rows last."""
    shutil.copytree(COMMITTED, dest, ignore=shutil.ignore_patterns("tables", "figures", ".locks", ".hydra"))
    with open(COMMITTED / "results.csv", newline="", encoding="utf-8") as fh:
        header, *body = list(csv.reader(fh))
    column = header.index("config_hash")
    out, copy = [header], 0
    while len(out) - 1 < rows - len(body):
        for row in body[: rows - len(body) - (len(out) - 1)]:
            out.append([*row[:column], f"{copy:06d}{row[column][6:]}", *row[column + 1:]])
        copy += 1
    with open(dest / "results.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(out + body)
    return dest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compare-commit", default=None, help="also time the package as it was at this commit")
    p.add_argument("--out", default=str(ROOT / "results" / "bench" / "results_scale.md"))
    args = p.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory(prefix="lengthx-bench-") as tmp:
        tmp_path = Path(tmp)
        sizes = {"committed": tmp_path / "small", f"{args.rows:,} rows": grown_copy(tmp_path / "big", args.rows)}
        shutil.copytree(COMMITTED, sizes["committed"], ignore=shutil.ignore_patterns("tables", "figures", ".locks"))
        codes = {"this checkout": str(ROOT)}
        if args.compare_commit:
            codes[args.compare_commit] = str(export_commit(args.compare_commit, tmp_path / "old"))
        times: dict[tuple[str, str, str], list[float]] = {}
        for _ in range(args.rounds):
            for code, path in codes.items():
                for name, argv in COMMANDS:
                    for size, folder in sizes.items():
                        seconds = timed([sys.executable, "-m", "lengthx.cli", *argv(folder)], tmp_path,
                                        {**env, "PYTHONPATH": path}, 0)
                        times.setdefault((code, name, size), []).append(seconds)
    lines = [f"# Reading results.csv at {args.rows:,} rows", "",
             f"`python scripts/bench_results_scale.py` (rounds: {args.rounds}; one thread; median seconds).", "",
             "| code | command | committed | grown | ratio |", "|---|---|---|---|---|"]
    small, big = list(sizes)
    for code in codes:
        for name, _ in COMMANDS:
            a, b = (statistics.median(times[(code, name, s)]) for s in (small, big))
            lines.append(f"| {code} | {name} | {a:.1f} s | {b:.1f} s | {b / a:.1f}x |")
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
