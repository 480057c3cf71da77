#!/usr/bin/env python
"""Train mini-t5-lm: a small LM-adapted T5, the offline stand-in for T5-LM (paper A Table 3) and CodeT5+.

Paper A's T5-LMs are T5s with learned relative position buckets (32 buckets, max distance 128) trained at
L_tr = 512 and adapted to prefix language modelling: the encoder reads a prefix, the decoder predicts its
continuation. This script trains the same kind of model from scratch, offline, on one CPU thread:

1. the training text is the standard library's own source as the ``lm`` and ``code_completion`` tasks read
   it (:func:`lengthx.tasks.code_completion.stdlib_sources`), minus the files held out by a hash of their
   path (:func:`lengthx.data.splits.is_test_document`, 10%); those held-out files are what the mini profile
   scores, so no evaluated continuation was ever trained on;
2. the training files are tokenised once (mini-t5's tokenizer: numbers in pieces of at most three digits,
   newlines kept) into one token stream, and every batch is sliced from it as token ids: the encoder reads
   the ``L_tr - 1`` tokens before a random split point and ``</s>`` (exactly L_tr tokens, as T5's packed
   512-token inputs), the decoder predicts the next ``--target`` tokens;
3. the model is built from a ``T5Config`` (gated-GELU, RMS norm, no dropout) with
   ``relative_attention_max_distance`` = ``--max-distance`` (T5: 128 = L_tr / 4);
4. checkpoints (``state.pt``: weights, optimizer, step, curve, wall time) every ``--save-every`` steps; a
   rerun of the same command resumes exactly (batch ``k`` is drawn from a generator seeded by ``(seed, k)``);
   fp16 snapshots of the weights at ``--snapshots`` steps are kept for the training-time study;
5. ``--export DIR`` writes fp16 safetensors, the tokenizer, ``lengthx_mini.json``, ``curve.json`` and a model
   card whose held-out numbers are measured with the harness's own tasks on the exported weights:
   perplexity of ``lm`` at L_tr and next-line exact match / edit similarity of ``code_completion`` at L_tr.

    python scripts/train_mini_t5_lm.py --out runs/mini-t5-lm --export lengthx/checkpoints/mini-t5-lm

The variants of the regime study (docs/mini-t5-lm.md) are the same command with other ``--l-tr``,
``--max-distance``, ``--enc-layers`` or ``--steps``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TEST_PERCENT = 10.0
TOKENIZER = ROOT / "lengthx" / "checkpoints" / "mini-t5"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------ data
def corpus(split: str) -> list[tuple[str, str]]:
    """(path, source) of the standard library files of ``split`` ("train" or "test"), as the tasks read them."""
    from lengthx.data.corpora import stdlib_sources
    from lengthx.data.splits import is_test_document

    return [(p, t) for p, t in stdlib_sources() if is_test_document(p, TEST_PERCENT) == (split == "test")]


def token_stream(tok, docs: list[tuple[str, str]], cache: Path) -> np.ndarray:
    """The documents' token ids joined by ``</s>`` (each document's own ``</s>``), cached in ``cache``."""
    if cache.is_file():
        return np.load(cache)
    rows = tok([t for _, t in docs], add_special_tokens=True)["input_ids"]  # each ends with </s>
    stream = np.concatenate([np.asarray(r, dtype=np.int32) for r in rows])
    np.save(cache, stream)
    return stream


def batch(stream: np.ndarray, step: int, args: argparse.Namespace, eos: int) -> dict[str, torch.Tensor]:
    """Batch ``step``: encoder = the L_tr - 1 tokens before a split point + ``</s>``, labels = the next tokens."""
    rng = np.random.default_rng([args.seed, step])
    n_in = args.l_tr - 1
    starts = rng.integers(n_in, len(stream) - args.target, size=args.batch_size)
    enc = np.stack([stream[s - n_in : s] for s in starts])
    lab = np.stack([stream[s : s + args.target] for s in starts])
    enc = np.concatenate([enc, np.full((args.batch_size, 1), eos, dtype=np.int32)], axis=1)
    return {"input_ids": torch.from_numpy(enc.astype(np.int64)), "labels": torch.from_numpy(lab.astype(np.int64))}


# ----------------------------------------------------------------------------------------------- model
def build_model(args: argparse.Namespace, vocab: int):
    """A randomly initialised T5 (T5 v1.1 layout: gated-GELU, untied head off, no dropout)."""
    from transformers import T5Config, T5ForConditionalGeneration

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


def held_out_loss(model, stream: np.ndarray, args: argparse.Namespace, eos: int, n: int = 64) -> float:
    """Mean token NLL on ``n`` fixed windows of the held-out stream (the curve's validation loss)."""
    sub = argparse.Namespace(**{**vars(args), "batch_size": n, "seed": args.seed + 1_000_003})
    b = batch(stream, 0, sub, eos)
    model.eval()
    with torch.no_grad():
        loss = float(model(**b).loss)
    model.train()
    return loss


# --------------------------------------------------------------------------------------------- training
def train(args: argparse.Namespace) -> tuple[object, dict]:
    from transformers import AutoTokenizer

    args.out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(args.tokenizer), trust_remote_code=False)
    eos = tok.eos_token_id
    train_stream = token_stream(tok, corpus("train"), args.out / "train_ids.npy")
    test_stream = token_stream(tok, corpus("test"), args.out / "test_ids.npy")
    model = build_model(args, len(tok))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    state = {"step": 0, "seconds": 0.0, "curve": [], "args": {k: str(v) for k, v in vars(args).items()}}
    ckpt = args.out / "state.pt"
    if ckpt.is_file():
        saved = torch.load(ckpt, map_location="cpu", weights_only=True)  # tensors, numbers, strings: nothing to execute
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        log(f"resumed at step {state['step']} ({state['seconds'] / 60:.1f} min so far)")
    log(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; train stream "
        f"{len(train_stream):,} tokens, held-out {len(test_stream):,}; {args.steps} steps of {args.batch_size}")

    def save() -> None:
        tmp = args.out / "state.pt.tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, tmp)
        os.replace(tmp, ckpt)

    model.train()
    t0, seen, running = time.time(), 0, []
    budget = args.max_minutes * 60 if args.max_minutes else math.inf
    while state["step"] < args.steps and state["seconds"] + (time.time() - t0) < budget:
        step = state["step"]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        loss = model(**batch(train_stream, step, args, eos)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running.append(float(loss.detach()))
        state["step"] = step + 1
        seen += 1
        if state["step"] % args.log_every == 0 or state["step"] == args.steps:
            elapsed = state["seconds"] + time.time() - t0
            row = {"step": state["step"], "loss": round(sum(running) / len(running), 4),
                   "held_out_loss": round(held_out_loss(model, test_stream, args, eos), 4),
                   "minutes": round(elapsed / 60, 2)}
            state["curve"].append(row)
            running = []
            log(f"step {row['step']}/{args.steps}  loss {row['loss']:.3f}  held-out {row['held_out_loss']:.3f}  "
                f"{row['minutes']:.1f} min")
        if state["step"] in args.snapshots:
            snap = args.out / f"step-{state['step']}"
            export_weights(model, tok, snap)
        if state["step"] % args.save_every == 0:
            state["seconds"] += time.time() - t0
            t0 = time.time()
            save()
    state["seconds"] += time.time() - t0
    save()
    return model, state


def export_weights(model, tok, path: Path) -> None:
    """fp16 safetensors and the tokenizer in ``path`` (loadable by ``T5ForConditionalGeneration``)."""
    import copy

    half = copy.deepcopy(model).half()
    half.save_pretrained(str(path))
    tok.save_pretrained(str(path))


# ----------------------------------------------------------------------------------------------- export
def card_metrics(path: Path | str, l_tr: int, n: int) -> dict:
    """Held-out numbers at L_tr of the weights in ``path``, measured with the harness's own tasks as the
    mini profile configures them (held-out standard-library files, examples of seed 0):

    - ``ppl`` / ``ppl_tokens``: ``lm`` perplexity of the continuation (mean of per-example perplexities /
      token-weighted), the encoder reading the L_tr tokens before it;
    - ``em`` / ``es``: ``code_completion`` next-line exact match (%) and edit similarity at L_tr tokens of code.
    """
    from lengthx.models.generation import generate
    from lengthx.models.loading import load_model
    from lengthx.models.minis import compose_run
    from lengthx.tasks import Setting, build_task

    cfg = compose_run(["model=mini-t5-lm", f"model.path={path}", f"model.l_tr={l_tr}", "task=lm"])
    loaded = load_model(cfg.model, device="cpu", dtype="float32")
    at_l_tr = Setting(str(l_tr), l_tr, "tokens")
    lm = build_task(cfg.task, "mini")
    scores = lm.evaluate(loaded, lm.examples(at_l_tr, loaded.tokenizer, n, 0), batch_size=8)
    code_cfg = compose_run(["model=mini-t5-lm", f"model.path={path}", "task=code_completion"]).task
    code = build_task(code_cfg, "mini")
    examples = code.examples(at_l_tr, loaded.tokenizer, n, 0)
    outputs = []
    for i in range(0, n, 8):
        outputs += generate(loaded, [e.prompt for e in examples[i:i + 8]], code.max_new_tokens, first_line=True,
                            start_with_text=code.start_with_text)
    graded = [code.score(o, e) for o, e in zip(outputs, examples, strict=True)]
    return {
        "n_eval": n, "continuation": int(cfg.task.continuation_tokens),
        "ppl": sum(s["perplexity"] for s in scores) / n,
        "ppl_tokens": math.exp(sum(s["nll"] * s["tokens"] for s in scores) / sum(s["tokens"] for s in scores)),
        "em": sum(g["exact_match"] for g in graded) / n, "es": sum(g["edit_similarity"] for g in graded) / n,
    }


CARD = """---
library_name: transformers
tags: [lengthx, paper-a, mini]
---
# mini-t5-lm

A {params_m:.2f}M-parameter `T5ForConditionalGeneration` (learned relative position buckets) trained from
scratch by `lengthx` as the offline stand-in for T5-LM (paper A Table 3 / Table 8) and CodeT5+ (Tables 6,
11-13, code key retrieval) in the `mini` profile. It is a tool for measuring paper A's effect on a CPU,
not a code model of any quality.

- **Objective**: prefix language modelling, as T5's LM adaptation: the encoder reads the {l_tr_in} tokens
  before a random split point and `</s>` (L_tr = **{l_tr}** tokens), the decoder predicts the next {target}.
- **Data**: the Python standard library's `.py` files as the `lm` and `code_completion` tasks read them
  ({stdlib}), {train_files} training files ({train_tokens:,} tokens); {test_files} files held out by a hash of
  their path ({test_percent:.0f}%), the files the mini profile scores.
- **Tokenizer**: mini-t5's (8000-piece Unigram, numbers in pieces of at most 3 digits, newlines kept).
- **Architecture**: d_model {d_model}, {heads} heads x d_kv {d_kv}, d_ff {d_ff} (gated-GELU), {enc_layers} encoder /
  {dec_layers} decoder layers, tied embeddings; {buckets} buckets, `relative_attention_max_distance` **{max_distance}**
  (T5: 128 at L_tr 512).
- **Training**: {steps} steps of {batch_size} windows ({tokens:,} encoder tokens), AdamW lr {lr} (warm-up {warmup},
  cosine to 10%), seed {seed}; {minutes:.1f} min wall time on {threads} CPU thread(s) ({device}; the machine
  was shared with other jobs). Final training loss {final_loss:.3f}, held-out {final_held_out:.3f}. Exported in fp16.
- **Held-out at L_tr** (exported weights loaded in fp32, the harness's tasks, {n_eval} examples each):
  `lm` perplexity **{ppl:.3f}** (mean of per-example perplexities of {continuation}-token continuations;
  token-weighted {ppl_tokens:.3f}); `code_completion` next-line exact match **{em:.1f}%**, edit similarity
  **{es:.1f}** (greedy decoding whose first token is not whitespace, as the mini profile decodes code: with
  one token per space, plain greedy decoding loops on indentation and scores 0).

Reproduce: `{command}`
"""


def export(model, state: dict, args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(args.tokenizer), trust_remote_code=False)
    out = Path(args.export)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    export_weights(model, tok, tmp)
    nums = card_metrics(tmp, args.l_tr, args.card_examples)
    last = state["curve"][-1] if state["curve"] else {}
    train_docs, test_docs = corpus("train"), corpus("test")
    import sysconfig

    meta = {
        "name": out.name, "stands_for": ["t5-large-lm", "t5-xl-lm", "t5-xxl-lm", "codet5p-770m-py"],
        "l_tr": args.l_tr, "l_tr_in": args.l_tr - 1, "target": args.target, "d_model": args.d_model,
        "heads": args.heads, "d_kv": args.d_model // args.heads, "d_ff": args.d_ff, "enc_layers": args.enc_layers,
        "dec_layers": args.dec_layers, "buckets": args.buckets, "max_distance": args.max_distance,
        "params_m": sum(p.numel() for p in model.parameters()) / 1e6, "steps": state["step"],
        "batch_size": args.batch_size, "tokens": state["step"] * args.batch_size * args.l_tr, "lr": args.lr,
        "warmup": args.warmup, "seed": args.seed, "minutes": state["seconds"] / 60,
        "threads": torch.get_num_threads(), "device": f"CPU, {platform.machine()}",
        "final_loss": float(last.get("loss", float("nan"))),
        "final_held_out": float(last.get("held_out_loss", float("nan"))),
        "stdlib": sysconfig.get_paths()["stdlib"], "train_files": len(train_docs), "test_files": len(test_docs),
        "train_tokens": int(np.load(args.out / "train_ids.npy", mmap_mode="r").shape[0]),
        "test_percent": TEST_PERCENT, **nums,
        "command": "python scripts/train_mini_t5_lm.py " + " ".join(args.argv),
    }
    (tmp / "lengthx_mini.json").write_text(json.dumps(meta, indent=1))
    (tmp / "curve.json").write_text(json.dumps(state["curve"]))
    (tmp / "README.md").write_text(CARD.format(**meta))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    log(f"exported {out}: ppl@L_tr {nums['ppl']:.3f}, next-line EM {nums['em']:.1f}%, ES {nums['es']:.1f}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "mini-t5-lm", help="run directory (resumable)")
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
    args = p.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    args.snapshots = {int(s) for s in str(args.snapshots).split(",") if s.strip()}
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    model, state = train(args)
    if state["step"] < args.steps:
        log(f"stopped at step {state['step']} of {args.steps} (--max-minutes); rerun to resume")
        return
    if args.export:
        export(model, state, args)


if __name__ == "__main__":
    main()
