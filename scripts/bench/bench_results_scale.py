"""Benchmark of the commands that read ``results.csv`` at a lab's size (docs/results.md): ``lengthx tables
--summary``, ``lengthx tables`` and a ``lengthx run`` whose cells are all done, on the committed ``results/mini``
and on copies grown to ``--rows`` rows (older configurations of the same cells; or, a lab's store, distinct cells
of other models), the committed rows last so that the run still finds its cells done; side by side, one thread.

Each command runs as a fresh process once per round, after one round that is not counted: it leaves what any
earlier command leaves (the parsed copy of ``results.csv``, the run's kept cell hashes), the state a user's
second command finds. The rounds interleave the sizes and the code versions so that a busy machine slows them
alike. The table gives the median CPU seconds of each process (user + system: one thread, so its time on one
core) and its median wall-clock seconds, at both sizes; the ratio is grown / committed. A last line times the
first command on a grown copy without those files (``cold``: the first read after a write, or the first run of
new inputs). ``--compare-commit REV`` also times the package as it was at ``REV``. The run's output is checked:
a command that does not find every cell done stops the benchmark (its number would time a computation).

    python scripts/bench/bench_results_scale.py                            # -> results/bench/results_scale.md
    python scripts/bench/bench_results_scale.py --compare-commit main~3    # … with the commit's numbers beside
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_cli_startup import export_commit

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "mini"
RUN = ["run", "model=mini-t5-lm", "task=lm", "method=none"]  # five cells of paper A Table 3, done in results/mini
COMMANDS = (
    ("tables --summary", lambda d: ["tables", "--summary", "--results-dir", str(d)]),
    ("tables", lambda d: ["tables", "--results-dir", str(d), "--out", str(d / "tables")]),
    ("run, every cell done", lambda d: [*RUN, f"results_dir={d}"]),
)
CACHES = (".cache", ".hydra", "tables")  # what the commands leave beside the results
# committed results/mini; grown with old configurations of the same cells; grown with cells of other models
SIZES = ("committed", "grown", "distinct")


def grown_copy(dest: Path, rows: int, distinct: bool = False) -> Path:
    """``results/mini`` copied to ``dest`` with ``results.csv`` grown to ``rows`` rows: copies of its rows under
    other configuration hashes first (``distinct``: under other model names too, so each copy's cells are cells of
    their own, as in a lab's store of many models), its own rows last."""
    shutil.copytree(COMMITTED, dest, ignore=shutil.ignore_patterns("tables", "figures", ".locks", *CACHES))
    with open(COMMITTED / "results.csv", newline="", encoding="utf-8") as fh:
        header, *body = list(csv.reader(fh))
    column, model, cell = header.index("config_hash"), header.index("model"), header.index("cell")
    seen: set[str] = set()
    older = [row[cell] in seen or seen.add(row[cell]) for row in body]  # an older version of a cell above it
    out, copy = [header], 0
    while len(out) - 1 < rows - len(body):
        for i, row in enumerate(body[: rows - len(body) - (len(out) - 1)]):
            new = [*row[:column], f"{copy:06d}{row[column][6:]}", *row[column + 1:]]
            if distinct:  # two in five older versions become cells of a model of their own
                name = f"lab{copy:04d}" + (f"v{i}" if older[i] and i % 5 < 2 else "")
                new[model], new[cell] = f"{name}-{row[model]}", f"{name}-{row[cell]}"
            out.append(new)
        copy += 1
    with open(dest / "results.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(out + body)
    return dest


INF = float("inf")


def measured(argv: list[str], cwd: Path, env: dict[str, str], run: bool,
             limit: int | None = None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one fresh process running ``argv`` to its end (CPU: the user + system time
    the children of this process gained meanwhile); a run must report every cell done. With ``limit``, a process
    that spends that many CPU seconds is stopped (SIGXCPU) and its times are returned as infinite (">")."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    cap = (lambda: resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))) if limit else None
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, preexec_fn=cap)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if limit and proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return float("inf"), float("inf")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-800:]}")
    if run:
        status = re.findall(r"^\S+\|\S+\s+(\w+)", proc.stdout, re.M)
        if not status or set(status) != {"done"}:
            raise SystemExit(f"{' '.join(argv)}: not every cell is done at this checkout ({status}); pick a "
                             "command whose cells results/mini holds (RUN)")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compare-commit", default=None, help="also time the package as it was at this commit")
    p.add_argument("--compare-limit", type=int, default=300,
                   help="CPU seconds after which a command of the compared commit is stopped (shown as > N s)")
    p.add_argument("--out", default=str(ROOT / "results" / "bench" / "results_scale.md"))
    args = p.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    codes = {"this checkout": str(ROOT)}
    times: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    cold: dict[tuple[str, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="lengthx-bench-") as tmp:
        tmp_path = Path(tmp)
        if args.compare_commit:
            codes[args.compare_commit] = str(export_commit(args.compare_commit, tmp_path / "old"))
        grown = grown_copy(tmp_path / "grown", args.rows)
        distinct = grown_copy(tmp_path / "distinct", args.rows, distinct=True)
        with open(distinct / "results.csv", newline="", encoding="utf-8") as fh:
            rows_ = csv.reader(fh)
            column = next(rows_).index("cell")
            n_distinct = len({row[column] for row in rows_})
        folders: dict[tuple[str, str], Path] = {}
        for k, code in enumerate(codes):  # each code version reads copies of its own (its caches stay its own)
            folders[(code, "committed")] = Path(shutil.copytree(
                COMMITTED, tmp_path / f"small{k}", ignore=shutil.ignore_patterns("tables", "figures", ".locks",
                                                                                 *CACHES)))
            folders[(code, "grown")] = Path(shutil.copytree(grown, tmp_path / f"big{k}"))
            folders[(code, "distinct")] = Path(shutil.copytree(distinct, tmp_path / f"lab{k}"))
        limits = {code: None if code == "this checkout" else args.compare_limit for code in codes}
        for code, path in codes.items():  # the first command of each on a grown copy with nothing beside it
            for name, argv in COMMANDS:
                folder = Path(shutil.copytree(grown, tmp_path / "cold"))
                cold[(code, name)] = measured([sys.executable, "-m", "lengthx.cli", *argv(folder)], tmp_path,
                                              {**env, "PYTHONPATH": path}, name.startswith("run"), limits[code])
                shutil.rmtree(folder)
        stopped: set[tuple[str, str, str]] = set()  # a command stopped at its limit is not run again
        for round_ in range(args.rounds + 1):  # the first round leaves each command's files and is not counted
            for code, path in codes.items():
                for name, argv in COMMANDS:
                    for size in SIZES:
                        took = (INF, INF) if (code, name, size) in stopped else measured(
                            [sys.executable, "-m", "lengthx.cli", *argv(folders[(code, size)])], tmp_path,
                            {**env, "PYTHONPATH": path}, name.startswith("run"), limits[code])
                        if took[0] == INF:
                            stopped.add((code, name, size))
                        if round_:
                            times.setdefault((code, name, size), []).append(took)
    lines = [f"# Reading results.csv at {args.rows:,} rows", "",
             f"`python scripts/bench/bench_results_scale.py --rounds {args.rounds}"
             f"{f' --compare-commit {args.compare_commit} --compare-limit {args.compare_limit}' if args.compare_commit else ''}` "
             f"(rounds: {args.rounds}, after one not counted; one thread; medians; CPU = user + system seconds of "
             "the process, its time on one core).", "",
             "| code | command | committed CPU | grown CPU | ratio | distinct cells CPU | committed wall | grown wall "
             "| distinct wall | grown, cold: CPU / wall |", "|---|---|---|---|---|---|---|---|---|---|"]
    for code in codes:
        for name, _ in COMMANDS:
            (cpu_a, wall_a), (cpu_b, wall_b), (cpu_c, wall_c) = (
                (statistics.median(t[0] for t in times[(code, name, s)]),
                 statistics.median(t[1] for t in times[(code, name, s)])) for s in SIZES)
            cc, cw = cold[(code, name)]
            sec = lambda t: f"> {args.compare_limit} s" if t == INF else f"{t:.1f} s"  # noqa: E731
            ratio = f"{cpu_b / cpu_a:.1f}x" if INF not in (cpu_a, cpu_b) else "–"
            lines.append(f"| {code} | {name} | {sec(cpu_a)} | {sec(cpu_b)} | {ratio} | {sec(cpu_c)} "
                         f"| {sec(wall_a)} | {sec(wall_b)} | {sec(wall_c)} | {sec(cc)} / {sec(cw)} |")
    lines += ["", f"The distinct copy holds {n_distinct:,} distinct cells in its {args.rows:,} rows (copies of results/mini's "
              "rows under other model names, two in five older versions of a cell a cell of its own, as in a lab's "
              "store of many models and settings); the grown copy holds older configurations of results/mini's own "
              "cells." + (f" A command of {args.compare_commit} that spent {args.compare_limit} s of CPU was stopped "
                          "there (> N s) and not run again." if args.compare_commit else "")]
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
