"""The T5-LM stand-in's recipe (mini-t5-lm, docs/mini-t5-lm.md): a small LM-adapted T5, the offline stand-in for
T5-LM (paper A Table 3) and CodeT5+, trained from scratch on one CPU thread on the one loop of
:mod:`lengthx.minis.loop`.

Paper A's T5-LMs are T5s with learned relative position buckets (32 buckets, max distance 128) trained at
L_tr = 512 and adapted to prefix language modelling: the encoder reads a prefix, the decoder predicts its
continuation. The recipe: the data of :mod:`lengthx.minis.t5_lm_data`; a ``T5Config`` (gated-GELU, RMS norm,
no dropout) with ``relative_attention_max_distance`` = ``--max-distance`` (T5: 128 = L_tr / 4); AdamW with
linear warm-up and cosine decay to 10%; the state saved every ``--save-every`` steps (a rerun resumes exactly);
fp16 snapshots at ``--snapshots`` steps for the training-time study; ``--export DIR`` writes the weights and a
card measured on them (:mod:`lengthx.minis.t5_lm_card`).

Entry point: ``python scripts/train_mini_t5_lm.py`` (its ``--help`` lists every option). The variants of the
regime study (docs/mini-t5-lm.md) are the same command with other ``--l-tr``, ``--max-distance``,
``--enc-layers`` or ``--steps``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

from lengthx.minis.export import export_fp16
from lengthx.minis.loop import Box, TrainingLoop, log
from lengthx.minis.t5_lm_card import export
from lengthx.minis.t5_lm_data import batch, corpus, held_out_loss, token_stream

TOKENIZER = Path(__file__).resolve().parents[1] / "checkpoints" / "mini-t5"
REPO = Path(__file__).resolve().parents[2]  # the checkout the entry point scripts/train_mini_t5_lm.py runs from


def build_model(args: argparse.Namespace, vocab: int) -> T5ForConditionalGeneration:
    """A randomly initialised T5 (T5 v1.1 layout: gated-GELU, no dropout), seeded by ``args.seed``."""
    cfg = T5Config(
        vocab_size=vocab, d_model=args.d_model, d_kv=args.d_model // args.heads, d_ff=args.d_ff,
        num_layers=args.enc_layers, num_decoder_layers=args.dec_layers, num_heads=args.heads,
        relative_attention_num_buckets=args.buckets, relative_attention_max_distance=args.max_distance,
        dropout_rate=0.0, feed_forward_proj="gated-gelu", tie_word_embeddings=True,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )
    torch.manual_seed(args.seed)
    return T5ForConditionalGeneration(cfg)


def lr_at(step: int, args: argparse.Namespace) -> float:
    """Linear warm-up over ``--warmup`` steps, then cosine decay to 10% at ``--steps``."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    frac = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


class LMRecipe:
    """mini-t5-lm on :class:`lengthx.minis.loop.TrainingLoop`: token-stream batches, the curve, snapshots."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        args.out.mkdir(parents=True, exist_ok=True)
        self.tok = AutoTokenizer.from_pretrained(str(args.tokenizer), trust_remote_code=False)
        self.eos = self.tok.eos_token_id
        self.train_stream = token_stream(self.tok, corpus("train"), args.out / "train_ids.npy")
        self.test_stream = token_stream(self.tok, corpus("test"), args.out / "test_ids.npy")
        self.model = build_model(args, len(self.tok))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
        self.running: list[float] = []

    def lr(self, loop: TrainingLoop) -> float:
        return lr_at(loop.step, self.args)

    def loss(self, step: int) -> torch.Tensor:
        loss = self.model(**batch(self.train_stream, step, self.args, self.eos)).loss
        self.running.append(float(loss.detach()))
        return loss

    def state_parts(self) -> dict[str, Any]:
        return {}

    def load_state_parts(self, saved: dict[str, Any]) -> None:
        pass

    def after_step(self, loop: TrainingLoop) -> None:
        args, step = self.args, loop.step
        if step % args.log_every == 0 or step == args.steps:
            with loop.untimed():
                held = held_out_loss(self.model, self.test_stream, args, self.eos)
            row = {"step": step, "loss": round(sum(self.running) / len(self.running), 4),
                   "held_out_loss": round(held, 4), "minutes": round(loop.minutes, 2)}
            loop.state["curve"].append(row)
            self.running = []
            log(f"step {row['step']}/{args.steps}  loss {row['loss']:.3f}  held-out {row['held_out_loss']:.3f}  "
                f"{row['minutes']:.1f} min")
        if step in args.snapshots:
            with loop.untimed():
                export_fp16(self.model, self.tok, args.out / f"step-{step}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``scripts/train_mini_t5_lm.py``'s options parsed from ``argv``."""
    args = parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    args.snapshots = {int(s) for s in str(args.snapshots).split(",") if s.strip()}
    return args


def parser() -> argparse.ArgumentParser:
    """The T5-LM trainer's options (``lengthx train-mini`` reads their names and kinds from here)."""
    p = argparse.ArgumentParser(prog="scripts/train_mini_t5_lm.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "runs" / "mini-t5-lm", help="run directory (resumable)")
    p.add_argument("--export", default=None, help="export the trained model here (fp16, tokenizer, model card)")
    p.add_argument("--tokenizer", type=Path, default=TOKENIZER)
    p.add_argument("--l-tr", type=int, default=128, help="encoder tokens per training window, </s> included")
    p.add_argument("--target", type=int, default=64, help="decoder tokens predicted per window")
    p.add_argument("--max-distance", type=int, default=32, help="relative_attention_max_distance")
    p.add_argument("--buckets", type=int, default=32)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--enc-layers", type=int, default=6)
    p.add_argument("--dec-layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-minutes", type=float, default=0.0, help="stop after this much training (0: no limit)")
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--snapshots", default="500,1000,2000", help="steps whose fp16 weights are kept (step-N/)")
    p.add_argument("--card-examples", type=int, default=200, help="held-out examples behind the card's numbers")
    return p


def main(argv: list[str] | None = None) -> None:
    """Train (or resume) mini-t5-lm as ``argv`` says, then export it if ``--export`` names a directory."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    recipe = LMRecipe(args)
    box = Box(args.steps, args.max_minutes, save_every_steps=args.save_every)
    loop = TrainingLoop(args.out, recipe.model, recipe.optimizer, recipe, box,
                        {"step": 0, "seconds": 0.0, "curve": [], "args": {k: str(v) for k, v in vars(args).items()}})
    loop.resume()
    log(f"{sum(p.numel() for p in recipe.model.parameters()) / 1e6:.2f}M parameters; train stream "
        f"{len(recipe.train_stream):,} tokens, held-out {len(recipe.test_stream):,}; {args.steps} steps of "
        f"{args.batch_size}")
    loop.run()
    if loop.step < args.steps:
        log(f"stopped at step {loop.step} of {args.steps} (--max-minutes); rerun to resume")
        return
    if args.export:
        export(recipe.model, loop.state, args)
