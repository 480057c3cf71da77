"""Algorithm 1's search: grid (the paper, 11 forward passes) vs bisection, side by side (docs/design.md §9).

On a seeded set of small random T5 encoders and extrapolation lengths, both searches calibrate the same
(model, length) pair against the same length-L_tr reference; the table reports whether they chose the same
τ and how many forward passes each needed. Usage: python scripts/bench/bench_alignment.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import T5Config, T5ForConditionalGeneration

from lengthx.alignment.algorithm1 import CalibrationOptions, calibrate
from lengthx.attention.temperature import ATTN_NAME, register
from lengthx.models import LoadedModel, get_family


def small_t5(seed: int) -> LoadedModel:
    register()
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=3, num_decoder_layers=1, num_heads=4,
                   relative_attention_max_distance=32, dropout_rate=0.0, decoder_start_token_id=0)
    model = T5ForConditionalGeneration(cfg)
    with torch.no_grad():  # a visible relative bias, as trained T5s have
        model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.normal_(0, 2.0)
    model.set_attn_implementation(ATTN_NAME)
    return LoadedModel(f"t5-seed{seed}", model.eval(), None, get_family("t5"), 64, torch.device("cpu"))


def batches(length: int, seed: int) -> list[dict[str, torch.Tensor]]:
    ids = torch.randint(3, 128, (1, length), generator=torch.Generator().manual_seed(seed))
    return [{"input_ids": ids, "attention_mask": torch.ones_like(ids)}]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 pairs instead of 10")
    p.add_argument("--out", default="results/bench/alignment.md")
    args = p.parse_args()
    torch.set_num_threads(1)
    pairs = [(seed, length) for seed, length in zip(range(10), [256, 384, 512, 640, 768] * 2, strict=True)]
    pairs = pairs[:4] if args.quick else pairs
    lines = ["| model seed | L_ex | mode | τ grid | τ bisect | passes grid | passes bisect | time ratio |",
             "|---|---|---|---|---|---|---|---|"]
    agree, total, pg, pb = 0, 0, 0, 0
    for seed, length in pairs:
        loaded = small_t5(seed)
        ref, ext = batches(64, seed), batches(length, 1000 + seed)
        for mode in ("pmax", "entropy"):
            t0 = time.perf_counter()
            g = calibrate(loaded, ref, ext, CalibrationOptions(mode, search="grid"))
            t1 = time.perf_counter()
            b = calibrate(loaded, ref, ext, CalibrationOptions(mode, search="bisect"))
            t2 = time.perf_counter()
            agree += g.tau == b.tau
            total += 1
            pg += g.forward_passes
            pb += b.forward_passes
            lines.append(f"| {seed} | {length} | {mode} | {g.tau} | {b.tau} | {g.forward_passes} | "
                         f"{b.forward_passes} | {(t2 - t1) / (t1 - t0):.2f} |")
    lines.append(f"\nSame τ on {agree}/{total} (model, length, mode) cases; forward passes: grid {pg}, "
                 f"bisect {pb} ({pb / pg:.2f}x). Each search also runs one reference pass at L_tr (not counted).")
    text = "# Algorithm 1: grid vs bisection\n\n" + "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
