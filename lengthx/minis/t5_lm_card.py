"""The T5-LM stand-in's export and model card (docs/mini-t5-lm.md): fp16 weights, ``lengthx_mini.json``,
``curve.json`` and a card whose held-out numbers at L_tr are measured with the harness's own tasks on the
exported weights."""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer, PreTrainedModel

from lengthx.minis.export import export_fp16
from lengthx.minis.loop import log
from lengthx.minis.t5_lm_data import TEST_PERCENT, corpus


def card_metrics(path: Path | str, l_tr: int, n: int) -> dict[str, Any]:
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


def export(model: PreTrainedModel, state: dict[str, Any], args: argparse.Namespace) -> None:
    """fp16 weights, tokenizer, ``lengthx_mini.json``, ``curve.json`` and the card into ``args.export``."""
    tok = AutoTokenizer.from_pretrained(str(args.tokenizer), trust_remote_code=False)
    out = Path(args.export)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    export_fp16(model, tok, tmp)
    nums = card_metrics(tmp, args.l_tr, args.card_examples)
    last = state["curve"][-1] if state["curve"] else {}
    train_docs, test_docs = corpus("train"), corpus("test")
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
