"""Training-memory bench of paper B's segmented training (docs/design.md §5, §9).

At equal L_t, chunk-α and prefix-α train on sequences of L_t tokens whose positions reach L_e, so their
memory should be that of plain training at L_t, while ``full`` trains on all L_e tokens (paper B §3.1). This
bench measures the peak memory of a few training steps (forward, backward, AdamW step) for

* ``plain``       — contiguous sequences of L_t tokens (positions 0…L_t−1, the model as built);
* ``chunk-0.25``  — chunk-α samples of L_t tokens from L_e = 4·L_t (positions up to L_e);
* ``prefix-0.25`` — prefix-α samples, likewise (loss on the suffix only);
* ``full``        — whole sequences of L_e = 4·L_t tokens,

for a small GPT-2 (APE, ``wpe`` interpolated to L_e as paper B §3.2 does) and, unless ``--families`` says
otherwise, a GPT-NeoX (RoPE) of the same size, both built from configs with random weights. Batches come from
the project's own collator (``lengthx.segmented.collate_segmented``), the forward from
``lengthx.segmented.models.segmented_forward``, the loss and optimizer from ``lengthx.segmented.loop``.

Each variant runs in its own subprocess, one after another in one run, so peaks do not mix. On CPU the peak
is the resident set: the child resets the kernel's high-water mark (``/proc/self/clear_refs``) after the
model and data are built and reads ``VmHWM`` after the steps; the table gives that peak and the *training
increment* (peak − RSS just before the first step: activations, gradients, optimizer state and temporaries),
each as a ratio to ``plain``. On CUDA, ``torch.cuda.max_memory_allocated`` is used the same way.

A second table sets the loop's loss computed whole against the same loss chunked over the sequence
(:mod:`lengthx.segmented.loss`, forced to ``--loss-chunk`` positions a chunk) for a BLOOM-shaped model of the
same width with BLOOM's 250,880-token vocabulary (``--loss-families``, ``--loss-vocab``; plain L_t batches): the
chunked peak as a ratio to the whole one.

    python scripts/bench/bench_training_memory.py            # d=256, 4 layers, L_t=512 -> results/bench/training_memory.md
    python scripts/bench/bench_training_memory.py --quick    # d=128, 2 layers, L_t=128, gpt2 only -> …_quick.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("plain", "chunk-0.25", "prefix-0.25", "full")
LOSS_VARIANTS = ("loss-whole", "loss-chunked")  # plain L_t batches; the loss whole or in chunks
L_E_FACTOR = 4


# ---- child: one (family, variant) ------------------------------------------------------------------------


def _rss_kib(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of this process in KiB (Linux)."""
    match = re.search(rf"{field}:\s+(\d+)\s+kB", Path("/proc/self/status").read_text())
    return int(match.group(1)) if match else -1


def _reset_hwm() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (``echo 5 > /proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def build_model(family: str, args: argparse.Namespace) -> Any:
    """A causal LM of ``family`` from a config (random weights, fp32), positions up to L_t as built: ``args``
    gives ``vocab``, ``l_t``, ``d_model``, ``layers`` (heads = d_model / 64) and ``attn``."""
    import torch

    torch.manual_seed(0)
    heads = max(1, args.d_model // 64)
    if family == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(vocab_size=args.vocab, n_positions=args.l_t, n_embd=args.d_model, n_layer=args.layers,
                         n_head=heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
        model = GPT2LMHeadModel(cfg)
    elif family == "gpt_neox":
        from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

        cfg = GPTNeoXConfig(vocab_size=args.vocab, hidden_size=args.d_model, num_hidden_layers=args.layers,
                            num_attention_heads=heads, intermediate_size=4 * args.d_model,
                            max_position_embeddings=args.l_t, hidden_dropout=0.0, attention_dropout=0.0,
                            use_cache=False)
        model = GPTNeoXForCausalLM(cfg)
    elif family == "bloom":
        from transformers import BloomConfig, BloomForCausalLM

        cfg = BloomConfig(vocab_size=args.vocab, hidden_size=args.d_model, n_layer=args.layers, n_head=heads,
                          hidden_dropout=0.0, attention_dropout=0.0, use_cache=False)
        model = BloomForCausalLM(cfg)
        args = argparse.Namespace(**{**vars(args), "attn": "eager"})  # BLOOM is eager-only
    else:
        raise ValueError(f"unknown family {family!r}; use gpt2, gpt_neox or bloom")
    model.set_attn_implementation(args.attn)
    return model


def make_batches(method: Any, l_t: int, l_e: int, steps: int, batch: int, vocab: int, device: Any) -> list[dict]:
    """``steps`` batches of ``batch`` random token sequences, each cut by ``method`` (a ``SegmentMethod``) with
    the project's collator (``collate_segmented``; one sampling generator per sequence, as the loop does)."""
    import torch

    from lengthx.segmented.sampling import collate_segmented, sample_generator

    source = method.source_length(l_t, l_e)
    g = torch.Generator().manual_seed(1)
    batches = []
    for step in range(steps):
        seqs = [torch.randint(0, vocab, (source,), generator=g) for _ in range(batch)]
        gens = [sample_generator(0, step * batch + i) for i in range(batch)]
        batches.append({k: v.to(device) for k, v in collate_segmented(seqs, method, l_t, gens).items()})
    return batches


def train_step(model: Any, optimizer: Any, batch: dict, autocast: Any = None, loss_limit: int | None = None) -> Any:
    """One optimizer step of the training loop (``segmented_forward``, ``causal_lm_loss``, backward, AdamW)
    under ``autocast`` (a context such as ``torch.autocast``; none = the model's own precision); the loss.
    ``loss_limit``: the loop's loss (``micro_batch_loss``), chunked above that many logit entries."""
    from contextlib import nullcontext

    from lengthx.segmented.loop import causal_lm_loss
    from lengthx.segmented.loss import micro_batch_loss
    from lengthx.segmented.models import segmented_forward

    with autocast if autocast is not None else nullcontext():
        if loss_limit is not None:
            loss = micro_batch_loss(model, model.get_output_embeddings(), batch, limit=loss_limit)
        else:
            out = segmented_forward(model, batch["input_ids"], batch["position_ids"], batch["attention_mask"])
            loss = causal_lm_loss(out.logits, batch["labels"])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def _child(family: str, variant: str, args: argparse.Namespace) -> dict:
    import torch

    from lengthx.segmented.loop import build_optimizer
    from lengthx.segmented.models import prepare_for_length
    from lengthx.segmented.sampling import SegmentMethod

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    l_t, l_e = args.l_t, L_E_FACTOR * args.l_t
    model = build_model(family, args)
    plain = variant == "plain" or variant in LOSS_VARIANTS
    method = SegmentMethod.parse("da" if plain else variant)  # da = whole L_t sequences
    loss_limit = {"loss-whole": 2**62, "loss-chunked": args.batch * args.vocab * args.loss_chunk}.get(variant)
    if not plain:
        prepare_for_length(model, family, l_e)  # GPT-2: wpe interpolated to L_e; NeoX: RoPE maximum raised
    model.to(device).train()
    optimizer = build_optimizer(model, lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95))
    batches = make_batches(method, l_t, l_e, args.steps, args.batch, args.vocab, device)
    train_len = int(batches[0]["input_ids"].shape[1])
    max_pos = int(batches[0]["position_ids"].max()) + 1

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    base_rss = _rss_kib("VmRSS") * 1024
    hwm_reset = _reset_hwm()
    t0 = time.perf_counter()
    losses = []
    for batch in batches:
        losses.append(float(train_step(model, optimizer, batch, loss_limit=loss_limit)))
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / len(batches)
    result = {
        "family": family, "variant": variant, "train_len": train_len, "max_position": max_pos,
        "params": sum(p.numel() for p in model.parameters()), "step_s": seconds, "loss": losses[-1],
        "rss_base": base_rss, "rss_peak": _rss_kib("VmHWM") * 1024, "hwm_reset": hwm_reset,
    }
    if cuda:
        result.update(cuda_base=base, cuda_peak=torch.cuda.max_memory_allocated())
    return result


# ---- parent: run every cell in its own process, write the table ------------------------------------------


def _run_all(families: list[str], variants: tuple[str, ...] | list[str], argv: list[str], timeout: float
             ) -> list[dict]:
    """One child per (family, variant), in order, each reported on stderr as it ends; their results."""
    results = []
    for family in families:
        for variant in variants:
            t0 = time.perf_counter()
            r = _run_child(family, variant, argv, timeout)
            results.append(r)
            status = r.get("error") or f"peak {_mib(r.get('cuda_peak', r['rss_peak']))} MiB"
            print(f"[{family} {variant}] {status} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return results


def _run_child(family: str, variant: str, argv: list[str], timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", f"{family}:{variant}", *argv]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"family": family, "variant": variant, "error": f"timeout after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"family": family, "variant": variant, "error": f"exit {proc.returncode}: {tail[0][:200]}"}
    return json.loads(lines[-1])


def _mib(x: float) -> str:
    return f"{x / 2**20:,.0f}"


def render(results: list[dict], args: argparse.Namespace, cuda: bool) -> str:
    """The Markdown report: one row per (family, variant), ratios to ``plain`` of the same family."""
    l_t = args.l_t
    lines = [
        "# Training memory: segmented vs plain vs full (paper B)",
        "",
        f"Generated by `scripts/bench/bench_training_memory.py{' --quick' if args.quick else ''}` on "
        f"{platform.node() or 'this machine'} ({platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch threads={args.threads}, device={args.device}); {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        f"Model: d_model={args.d_model}, {args.layers} layers, {max(1, args.d_model // 64)} heads, vocab "
        f"{args.vocab}, attn={args.attn}, fp32, random weights from a config. L_t={l_t}, L_e={L_E_FACTOR}·L_t="
        f"{L_E_FACTOR * l_t}, batch {args.batch}, {args.steps} steps of forward + backward + AdamW each; every "
        "cell in its own process, all in this one run.",
        "",
    ]
    if cuda:
        lines += ["Peak = `torch.cuda.max_memory_allocated` over the steps; increment = peak − allocated before "
                  "the first step.", ""]
        head = "| family | variant | tokens/seq | max position | peak alloc MiB | ratio | increment MiB | ratio |"
    else:
        lines += ["Peak = process peak RSS (`VmHWM`, reset after set-up) over the steps; increment = peak − RSS "
                  "just before the first step (activations, gradients, AdamW state, temporaries).", ""]
        head = "| family | variant | tokens/seq | max position | peak RSS MiB | ratio | increment MiB | ratio |"
    lines += [head + " s/step |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    key_peak, key_base = ("cuda_peak", "cuda_base") if cuda else ("rss_peak", "rss_base")
    verdicts = []
    for family in args.families:
        rows, plain = _family(results, family, "plain")
        lines += _rows(rows, plain, key_peak, key_base, lambda r, peak, inc, ratio, ratio_inc: (
            f"| {r['family']} | {r['variant']} | {r['train_len']} | {r['max_position']} | {_mib(peak)} | "
            f"{ratio} | {_mib(inc)} | {ratio_inc} | {r['step_s']:.2f} |"),
            lambda r: f"| {r['family']} | {r['variant']} | | | {r['error']} | | | | |")
        if plain is not None:
            verdicts.append(_verdict(family, rows, plain, key_peak, key_base))
    lines += ["", "Target (chunk/prefix within 10% of plain L_t; full well above):", ""]
    lines += [f"- {v}" for v in verdicts]
    return "\n".join(lines) + "\n"


def render_loss(results: list[dict], args: argparse.Namespace, cuda: bool) -> str:
    """The second table: the loss whole vs chunked (peak and increment, chunked as a ratio to whole)."""
    key_peak, key_base = ("cuda_peak", "cuda_base") if cuda else ("rss_peak", "rss_base")
    lines = ["", f"## The loss whole vs chunked over the sequence (vocab {args.loss_vocab}, plain L_t batches, "
             f"{args.loss_chunk} positions a chunk)", "",
             "| family | loss | peak MiB | ratio | increment MiB | ratio | s/step | final loss |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for family in args.loss_families:
        rows, whole = _family(results, family, "loss-whole")
        lines += _rows(rows, whole, key_peak, key_base, lambda r, peak, inc, ratio, ratio_inc: (
            f"| {r['family']} | {r['variant'][5:]} | {_mib(peak)} | {ratio} | {_mib(inc)} | {ratio_inc} | "
            f"{r['step_s']:.2f} | {r['loss']:.6f} |"),
            lambda r: f"| {r['family']} | {r['variant']} | {r['error']} | | | | | |")
    return "\n".join(lines) + "\n"


def _family(results: list[dict], family: str, base_variant: str) -> tuple[list[dict], dict | None]:
    """A family's rows and its measured row of ``base_variant`` (None when it failed or is missing)."""
    rows = [r for r in results if r["family"] == family]
    return rows, next((r for r in rows if r["variant"] == base_variant and "error" not in r), None)


def _rows(rows: list[dict], base: dict | None, key_peak: str, key_base: str, measured: Callable[..., str],
          failed: Callable[[dict], str]) -> list[str]:
    """One table line per row: ``failed(row)`` for a row with an error, else ``measured(row, peak, increment,
    peak ratio, increment ratio)`` against ``base``."""
    return [failed(r) if "error" in r else measured(r, *_against(r, base, key_peak, key_base)) for r in rows]


def _against(r: dict, base: dict | None, key_peak: str, key_base: str) -> tuple[float, float, str, str]:
    """A row's peak and increment, and each as a ratio to ``base``'s ("n/a" without one)."""
    peak, inc = r[key_peak], r[key_peak] - r[key_base]
    if base is None:
        return peak, inc, "n/a", "n/a"
    return (peak, inc, f"{peak / base[key_peak]:.2f}x",
            f"{inc / max(base[key_peak] - base[key_base], 1):.2f}x")


def _verdict(family: str, rows: list[dict], plain: dict, key_peak: str, key_base: str) -> str:
    def ratios(r: dict) -> tuple[float, float]:
        return (r[key_peak] / plain[key_peak],
                (r[key_peak] - r[key_base]) / max(plain[key_peak] - plain[key_base], 1))

    ok = [r for r in rows if "error" not in r]
    seg = [ratios(r) for r in ok if r["variant"] in ("chunk-0.25", "prefix-0.25")]
    full = [ratios(r) for r in ok if r["variant"] == "full"]
    seg_ok = bool(seg) and all(abs(p - 1) <= 0.10 and abs(i - 1) <= 0.10 for p, i in seg)
    full_ok = bool(full) and full[0][0] > 1.10 and full[0][1] > 1.5
    seg_txt = ", ".join(f"{p:.2f}x peak / {i:.2f}x increment" for p, i in seg) or "missing"
    full_txt = f"{full[0][0]:.2f}x peak / {full[0][1]:.2f}x increment" if full else "missing"
    return (f"{family}: chunk/prefix {seg_txt} → {'PASS' if seg_ok else 'FAIL'}; full {full_txt} → "
            f"{'PASS' if full_ok else 'FAIL'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="d=128, 2 layers, L_t=128, gpt2 only")
    parser.add_argument("--families", default=None, help="comma list of gpt2,gpt_neox (default: both)")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--l-t", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=50257, help="GPT-2's vocabulary by default")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--attn", default="sdpa", help="attention implementation (training default: sdpa)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per child (0: torch default)")
    parser.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per child")
    parser.add_argument("--out", default=None,
                        help="report path (default results/bench/training_memory.md; _quick.md with --quick)")
    parser.add_argument("--loss-families", default="bloom",
                        help="comma list for the whole-vs-chunked loss table (empty: no table)")
    parser.add_argument("--loss-vocab", type=int, default=250880, help="its vocabulary (BLOOM's by default)")
    parser.add_argument("--loss-chunk", type=int, default=64, help="its positions per chunk of the loss")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.d_model, args.layers, args.l_t, args.steps = 128, 2, 128, 2
        args.families = args.families or "gpt2"
    args.families = (args.families or "gpt2,gpt_neox").split(",")
    args.loss_families = [f for f in args.loss_families.split(",") if f]
    if args.out is None:
        args.out = str(ROOT / "results" / "bench" / f"training_memory{'_quick' if args.quick else ''}.md")
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"

    if args.child is not None:
        family, variant = args.child.split(":", 1)
        print(json.dumps(_child(family, variant, args)))
        return 0

    def forwarded(vocab: int) -> list[str]:
        return ["--d-model", str(args.d_model), "--layers", str(args.layers), "--l-t", str(args.l_t),
                "--vocab", str(vocab), "--batch", str(args.batch), "--steps", str(args.steps),
                "--attn", args.attn, "--threads", str(args.threads), "--device", args.device,
                "--loss-chunk", str(args.loss_chunk)]

    results = _run_all(args.families, VARIANTS, forwarded(args.vocab), args.timeout)
    loss_results = _run_all(args.loss_families, LOSS_VARIANTS, forwarded(args.loss_vocab), args.timeout)
    report = render(results, args, cuda=args.device.startswith("cuda"))
    if args.loss_families:
        report += render_loss(loss_results, args, cuda=args.device.startswith("cuda"))
    print(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    return 0 if all("error" not in r for r in results + loss_results) else 1


if __name__ == "__main__":
    sys.exit(main())
