"""Benchmark of T5 encoder attention: stock eager, stock SDPA, lengthx's offset-table path (docs/design.md §9).

A T5 encoder of 8 heads, 6 layers, d_model 512 (d_kv 64, d_ff 2048, random weights built from a config)
runs one forward pass per variant and length, each variant in its own subprocess so that peak RSS is per
variant, all side by side in one run. Every child runs under an address-space limit (``--mem-limit-gb``),
so a variant that needs more memory than the machine has fails with an allocation error (reported as OOM)
instead of taking the machine down. Times and peak RSS are reported as ratios to stock SDPA on the same
input. Achieved GFLOP/s (nominal dense FLOPs of the forward / time) is compared with a large fp32 matmul on
the same machine and thread count (the practical roofline).

Timing: each child warms up on a short input, then times one forward. By default torch runs one thread and
the time is the process's CPU time of the forward, which on a shared machine is far less sensitive to other
load than wall time (the wall time is reported too); every cell runs ``--rounds`` times, interleaved with
the other variants, and the best is kept.

Variants: ``eager`` and ``sdpa`` (stock transformers); ``ours`` (SDPA over the zero-copy bias view: statistics
off); ``ours-explicit`` (explicit-softmax tiles, no statistics); ``ours+stats`` (P_max and entropy capture,
Algorithm 1, from the fused kernel of ``lengthx.attention.fused``); ``ours+stats-tiles`` (the same statistics
from the explicit tiles, ``LENGTHX_FUSED_STATS=0``: the path before the fused kernel); ``ours+logits`` (stats
plus layer 0's average logit vector, Props. 1-2: layer 0 on the tiles); and ``*-pad`` variants on a
right-padded batch of two (lengths L and 3L/4). ``--profile`` adds a torch profile of one ``ours`` forward
at 8k: where the main path's time goes, and each part's share of the roofline.

    python scripts/bench/bench_attention.py            # 2k, 4k, 8k, 16k -> results/bench/attention.md
    python scripts/bench/bench_attention.py --quick    # 512, 1024: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
              relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.0,
              feed_forward_proj="relu", is_encoder_decoder=False, use_cache=False)
VARIANTS = ("eager", "sdpa", "ours", "ours-explicit", "ours+stats", "ours+stats-tiles", "ours+logits",
            "sdpa-pad", "ours-pad", "ours+stats-pad")
BASELINE = {v: ("sdpa-pad" if v.endswith("-pad") else "sdpa") for v in VARIANTS}
FULL_LENGTHS = (2048, 4096, 8192, 16384)
QUICK_LENGTHS = (512, 1024)


# ---- child: one variant at one length -------------------------------------------------------------------


def _nominal_flops(lengths: list[int]) -> float:
    """Dense FLOPs of the encoder forward (matmuls only): projections, QKᵀ and PV, feed-forward."""
    c = CONFIG
    inner = c["num_heads"] * c["d_kv"]
    total = 0.0
    for n in lengths:
        projections = 2 * n * c["d_model"] * inner * 4
        per_layer = projections + 2 * 2 * n * n * inner + 2 * 2 * n * c["d_model"] * c["d_ff"]
        total += c["num_layers"] * per_layer
    return total


def _encoder(base: str, threads: int):  # noqa: ANN202 - a transformers T5EncoderModel
    """The benchmark's seeded random encoder for variant ``base`` (stock eager/sdpa, or lengthx's paths)."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    from transformers import T5Config, T5EncoderModel

    from lengthx.attention.t5_bias import enable_efficient_t5
    from lengthx.attention.temperature import ATTN_NAME, register

    torch.manual_seed(0)
    register()
    model = T5EncoderModel(T5Config(**CONFIG)).eval()
    model.set_attn_implementation({"eager": "eager", "sdpa": "sdpa"}.get(base, ATTN_NAME))
    if base.startswith("ours"):
        enable_efficient_t5(model, mode="always", backend="explicit" if base == "ours-explicit" else "auto")
    return model


def _child(variant: str, length: int, repeats: int, threads: int) -> dict:
    import torch

    from lengthx.attention.stats import AttentionStats

    base = variant.removesuffix("-pad")
    if base.endswith("-tiles"):  # the explicit tiles compute the statistics (before the fused kernel)
        os.environ["LENGTHX_FUSED_STATS"] = "0"
        base = base.removesuffix("-tiles")
    model = _encoder(base, threads)
    padded = variant.endswith("-pad")
    lengths = [length, (3 * length) // 4] if padded else [length]
    ids = torch.randint(3, CONFIG["vocab_size"], (len(lengths), length))
    mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    modules = [blk.layer[0].SelfAttention for blk in model.encoder.block]
    want_stats = "stats" in base or "logits" in base

    def forward(x: torch.Tensor, m: torch.Tensor | None) -> AttentionStats | None:
        stats = AttentionStats(modules, logit_vector="logits" in base) if want_stats else None
        with torch.inference_mode():
            if stats is not None:
                with stats:
                    model(input_ids=x, attention_mask=m)
            else:
                model(input_ids=x, attention_mask=m)
        return stats

    warm = min(256, length)  # kernels and allocator warm-up, on a short input through the same path
    forward(ids[:, :warm], mask[:, :warm] if padded else None)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    cpu, wall = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        stats = forward(ids, mask if padded else None)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    single = torch.get_num_threads() == 1  # CPU time of one thread = its compute time, whatever else runs
    out = dict(status="ok", seconds=min(cpu) if single else min(wall), wall=min(wall),
               peak_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
               base_gib=base_rss, gflops=_nominal_flops(lengths) / 1e9, threads=torch.get_num_threads())
    if stats is not None:
        out["pmax"] = stats.mean("pmax")
        if "logits" in base:
            out["sigma"] = stats.logit_sigma()
    return out


def _profile_child(length: int, threads: int) -> dict:
    """Self CPU time of one ``ours`` forward by kind of op (torch profiler): SDPA's fused attention kernel,
    the dense matmuls (projections, feed-forward), the rest; with the nominal FLOPs of the first two."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    model = _encoder("ours", threads)
    ids = torch.randint(3, CONFIG["vocab_size"], (1, length))
    with torch.inference_mode():
        model(input_ids=ids[:, :256])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(input_ids=ids)
    parts = {"attention": 0.0, "matmul": 0.0, "other": 0.0}
    for ev in prof.key_averages():
        kind = ("attention" if "scaled_dot_product" in ev.key and "flash" in ev.key
                else "matmul" if ev.key in ("aten::mm", "aten::addmm", "aten::bmm") else "other")
        parts[kind] += ev.self_cpu_time_total / 1e6
    c = CONFIG
    attention = c["num_layers"] * 2 * 2 * length * length * c["num_heads"] * c["d_kv"]
    return dict(status="ok", seconds=parts, gflops=dict(attention=attention / 1e9,
                                                        matmul=(_nominal_flops([length]) - attention) / 1e9))


def _roofline(size: int = 4096, repeats: int = 5) -> float:
    """GFLOP/s of a large fp32 matmul (the practical peak of this machine at this thread count), timed like
    the variants (process CPU time when single-threaded, else wall time)."""
    import torch

    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        a @ b
        best = min(best, clock() - t0)
    return 2 * size**3 / best / 1e9


# ---- parent: orchestrate, format ---------------------------------------------------------------------------


def _run_variant(
    variant: str, length: int, repeats: int, threads: int, mem_limit: int, timeout: float
) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, str(length), "--repeats", str(repeats),
           "--threads", str(threads)]

    def limit() -> None:  # runs in the child before exec: cap its address space
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=limit, env=env,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        return dict(status="timeout")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    err = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    oom = proc.returncode < 0 or any(s in proc.stderr for s in ("can't allocate memory", "MemoryError",
                                                                   "out of memory", "std::bad_alloc"))
    return dict(status="OOM" if oom else "failed", error=err[0][:200])


def _mem_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 16 * 2**30


def _fmt(res: dict, base: dict | None, key: str, unit_fmt: str) -> str:
    if res.get("status") != "ok":
        return res.get("status", "?")
    text = unit_fmt.format(res[key])
    if base and base.get("status") == "ok" and base is not res:
        text += f" ({res[key] / base[key]:.2f}x)"
    return text


def render(results: dict, lengths: list[int], roof: float, meta: dict) -> str:
    """The Markdown report: one table per length, ratios against stock SDPA on the same input."""
    out = ["# T5 encoder attention benchmark (lengthx)", "",
           f"T5 encoder, 6 layers, 8 heads, d_model 512, d_ff 2048, fp32, random weights; {meta['machine']}; "
           f"{meta['threads']} thread(s); torch {meta['torch']}, transformers {meta['transformers']}. "
           f"One process per cell, run side by side; time = {meta['clock']} of one forward after a warm-up, "
           f"best of {meta['rounds']} interleaved round(s); peak RSS = the process's "
           f"maximum resident set (includes ~{meta['base']:.2f} GiB of interpreter, libraries and weights). "
           f"Address space capped at {meta['limit_gib']:.0f} GiB per process: OOM = allocation refused.",
           "", f"Practical roofline: {roof:.1f} GFLOP/s (4096² fp32 matmul). GFLOP/s below = nominal "
           "dense FLOPs of the forward (projections, QKᵀ, PV, feed-forward) / time; padded variants run a "
           "batch of two (L and 3L/4 tokens) and are compared with stock SDPA on the same batch.", ""]
    for n in lengths:
        out += [f"## L = {n}", "", "| variant | time s (vs sdpa) | wall s | peak RSS GiB (vs sdpa) | GFLOP/s "
                "| % roofline |", "|---|---|---|---|---|---|"]
        for v in VARIANTS:
            res = results.get((v, n))
            if res is None:
                continue
            base = results.get((BASELINE[v], n))
            gf = pct = wall = "-"
            if res.get("status") == "ok":
                rate = res["gflops"] / res["seconds"]
                gf, pct, wall = f"{rate:.1f}", f"{100 * rate / roof:.0f}%", f"{res['wall']:.2f}"
            out.append(f"| {v} | {_fmt(res, base, 'seconds', '{:.2f}')} | {wall} "
                       f"| {_fmt(res, base, 'peak_gib', '{:.2f}')} | {gf} | {pct} |")
        rel = []
        for a, b in (("ours+stats", "ours"), ("ours+stats-tiles", "ours"), ("ours+stats", "ours-explicit"),
                     ("ours+logits", "ours+stats")):
            ra, rb = results.get((a, n), {}), results.get((b, n), {})
            if ra.get("status") == "ok" and rb.get("status") == "ok":
                rel.append(f"{a} / {b} time = {ra['seconds'] / rb['seconds']:.2f}x")
        if rel:
            out += ["", "Statistics cost: " + "; ".join(rel) + "."]
        fused, tiles = results.get(("ours+stats", n), {}), results.get(("ours+stats-tiles", n), {})
        if "pmax" in fused and "pmax" in tiles:
            out += ["", f"Mean P_max over layers and heads: fused {fused['pmax']:.7f}, tiles {tiles['pmax']:.7f}."]
        out.append("")
    prof = results.get(("profile", 0))
    if prof is not None and prof.get("status") == "ok":
        total = sum(prof["seconds"].values())
        out += [f"## Where the main path's time goes (`ours`, L = {prof['length']}, torch profiler, self CPU time)",
                "", "| part | seconds | share | GFLOP/s | % roofline |", "|---|---|---|---|---|"]
        for part, label in (("attention", "SDPA's fused attention kernel (QKᵀ, softmax, PV)"),
                            ("matmul", "dense matmuls (projections, feed-forward)"), ("other", "everything else")):
            sec = prof["seconds"][part]
            rate = prof["gflops"].get(part)
            cells = (f"{rate / sec:.1f} | {100 * rate / sec / roof:.0f}%" if rate and sec else "- | -")
            out.append(f"| {label} | {sec:.2f} | {100 * sec / total:.0f}% | {cells} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small lengths (512, 1024): a smoke run")
    p.add_argument("--lengths", type=int, nargs="+", help="override the lengths")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--repeats", type=int, default=1, help="timed forwards per child (best kept)")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds per cell, best kept (default 2; 1 with --quick)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per child (0 = torch's default)")
    p.add_argument("--mem-limit-gb", type=float, default=None,
                   help="address-space cap per child (default: min(21, MemAvailable − 1) GiB)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per child")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "attention.md")
    p.add_argument("--profile", type=int, default=8192, metavar="LENGTH",
                   help="profile one `ours` forward at this length (0 = no profile)")
    p.add_argument("--child", nargs=2, metavar=("VARIANT", "LENGTH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child and args.child[0] == "profile":
        print(json.dumps(_profile_child(int(args.child[1]), args.threads)), flush=True)
        return 0
    if args.child:
        try:
            res = _child(args.child[0], int(args.child[1]), args.repeats, args.threads)
        except (RuntimeError, MemoryError) as err:  # allocation refused under the address-space cap
            msg = str(err).splitlines()[0][:200]
            oom = isinstance(err, MemoryError) or "allocate" in msg or "memory" in msg
            res = dict(status="OOM" if oom else "failed", error=msg)
        print(json.dumps(res), flush=True)
        return 0

    import torch
    import transformers

    lengths = args.lengths or (QUICK_LENGTHS if args.quick else FULL_LENGTHS)
    rounds = args.rounds or (1 if args.quick else 2)
    limit_gib = args.mem_limit_gb or min(21.0, _mem_available() / 2**30 - 1.0)
    mem_limit = int(limit_gib * 2**30)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    roof = _roofline()
    results: dict[tuple[str, int], dict] = {}
    for n in lengths:
        for _ in range(rounds):
            for v in args.variants:
                prev = results.get((v, n))
                if prev is not None and prev.get("status") != "ok":
                    continue  # a variant that failed (OOM) once is not retried
                t0 = time.perf_counter()
                res = _run_variant(v, n, args.repeats, args.threads, mem_limit, args.timeout)
                if prev is not None and res.get("status") == "ok":
                    res = dict(res, seconds=min(res["seconds"], prev["seconds"]),
                               wall=min(res["wall"], prev["wall"]),
                               peak_gib=max(res["peak_gib"], prev["peak_gib"]))
                results[(v, n)] = res
                nan = float("nan")
                print(f"L={n:6d} {v:15s} {res.get('status'):8s} time={res.get('seconds', nan):8.2f}s "
                      f"peak={res.get('peak_gib', nan):6.2f}GiB (wall {time.perf_counter() - t0:.0f}s) "
                      f"{res.get('error', '')}", file=sys.stderr, flush=True)
    if args.profile and not args.quick:
        results[("profile", 0)] = dict(_run_variant("profile", args.profile, 1, args.threads, mem_limit,
                                                    args.timeout), length=args.profile)
    bases = [r["base_gib"] for r in results.values() if r.get("status") == "ok" and "base_gib" in r]
    single = torch.get_num_threads() == 1
    meta = dict(machine=f"{platform.machine()} CPU, {os.cpu_count()} cores", threads=torch.get_num_threads(),
                torch=torch.__version__, transformers=transformers.__version__,
                clock="process CPU time" if single else "wall time",
                rounds=rounds, base=min(bases) if bases else float("nan"), limit_gib=limit_gib)
    text = render(results, list(lengths), roof, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
