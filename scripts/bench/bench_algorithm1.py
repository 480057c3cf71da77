"""Algorithm 1 end to end for one setting: statistics from the fused pass vs the explicit tiles (docs/design.md §9).

``lengthx calibrate`` on the offline mini profile's longest passkey setting (mini-t5, 55k = 7432 tokens, one
calibration example, a fresh results directory per run so nothing is served from cache), with the
statistics of every query row (``profile.stats_row_stride=1``, as the paper) and of every 8th row (the mini
profile's default), searched on the grid (11 passes) and by bisection, with ``LENGTHX_FUSED_STATS=1``
(after: the fused kernel) and ``=0`` (before: the explicit tiles, or the sampled rows at stride 8). Every
run is its own process on one thread, the variants interleaved round by round; wall and CPU time and peak
RSS come from the operating system's accounting of that process (``os.wait4``), best of ``--rounds``.
The τ each run picks is shown, so a faster path that picked another τ would show.

    python scripts/bench/bench_algorithm1.py            # -> results/bench/algorithm1.md
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTING = ["task=passkey", "method=pmax", "task.only=[55k]", "calibration.num_examples=1"]
VARIANTS = [(fused, stride, search) for stride in (1, 8) for search in ("grid", "bisect") for fused in (0, 1)]


def run_once(fused: int, stride: int, search: str) -> dict:
    """One ``lengthx calibrate`` process: wall, CPU time, peak RSS, the τ it picked and its forward passes."""
    with tempfile.TemporaryDirectory(prefix="lengthx-bench-a1-") as results:
        env = {**os.environ, "LENGTHX_RESULTS": results, "LENGTHX_FUSED_STATS": str(fused), "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "lengthx.cli", "calibrate", *SETTING, f"profile.stats_row_stride={stride}",
               f"method.search={search}"]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"lengthx calibrate failed ({' '.join(cmd[3:])}):\n{out[-2000:]}")
    found = re.search(r"τ=([0-9.]+)\s+S̄_tr\(1\)=\S+\s+\[computed, (\d+) forward passes\]", out)
    if found is None:
        raise SystemExit(f"no τ in the output of lengthx calibrate:\n{out[-2000:]}")
    return dict(wall=wall, cpu=usage.ru_utime + usage.ru_stime, rss_gb=usage.ru_maxrss / 2**20,
                tau=float(found.group(1)), passes=int(found.group(2)))


def render(best: dict[tuple[int, int, str], dict], rounds: int) -> str:
    lines = ["# Algorithm 1 end to end: fused statistics vs explicit tiles", "",
             f"`lengthx calibrate {' '.join(SETTING)}` (mini-t5, 7432 tokens, mini profile), one process per run "
             f"on one thread, variants interleaved, best of {rounds} round(s); CPU = user + system time of the "
             "process, peak RSS from the OS. Before = `LENGTHX_FUSED_STATS=0` (explicit tiles at stride 1; at "
             "stride 8, SDPA plus explicit scores of every 8th row); after = the fused kernel.", "",
             "| row stride | search | passes | τ before / after | wall s before | wall s after | after / before "
             "| CPU s before / after | peak RSS GB before / after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for stride in (1, 8):
        for search in ("grid", "bisect"):
            b, a = best[(0, stride, search)], best[(1, stride, search)]
            lines.append(f"| {stride} | {search} | {a['passes']} + reference | {b['tau']:.2f} / {a['tau']:.2f} "
                         f"| {b['wall']:.1f} | {a['wall']:.1f} | {a['wall'] / b['wall']:.2f}x "
                         f"| {b['cpu']:.1f} / {a['cpu']:.1f} | {b['rss_gb']:.2f} / {a['rss_gb']:.2f} |")
    lines += ["", "Wall time includes the process start, model load and example generation (the same in both)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "algorithm1.md")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from lengthx.attention import fused

    if fused.load() is None:  # built here once, so that no timed run pays for the build
        raise SystemExit("the fused statistics kernel could not be built: nothing to compare")
    best: dict[tuple[int, int, str], dict] = {}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            res = run_once(*variant)
            print(f"fused={variant[0]} stride={variant[1]} {variant[2]:6s} wall={res['wall']:.1f}s "
                  f"cpu={res['cpu']:.1f}s rss={res['rss_gb']:.2f}GB τ={res['tau']}", file=sys.stderr, flush=True)
            prev = best.get(variant)
            best[variant] = res if prev is None or res["wall"] < prev["wall"] else prev
    text = render(best, args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
