"""The decoder minis' held-out numbers and model card (paper B, ``profile=mini``; docs/design.md §5): held-out
perplexity at L_t of the exported fp16 weights with ``task=segmented_ppl``'s scorer, beside an add-one unigram
model of the training tokens scored on the same tokens, and ``results/mini/minis.md``."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from transformers import PreTrainedTokenizerBase

from lengthx.tasks.segmented_ppl import SegmentedPPLTask, perplexities, sequence_nll

TEST_PERCENT = 10  # the train/test split of `lengthx train` and `task=segmented_ppl` (data.test_percent)


def held_out_sequences(tokenizer: PreTrainedTokenizerBase, l_t: int, n: int) -> list[torch.Tensor]:
    """``n`` held-out L_t-token sequences, exactly those ``task=segmented_ppl`` scores at its L_t setting."""
    task_cfg = OmegaConf.create({"data": {"source": "stdlib", "test_percent": TEST_PERCENT}, "split": "test"})
    return [ids for _, ids in SegmentedPPLTask(task_cfg, "mini").sequences(tokenizer, l_t, n)]


def perplexity(model: torch.nn.Module, seqs: list[torch.Tensor]) -> tuple[float, float]:
    """(mean of per-sequence perplexities, token-weighted perplexity), as in ``task=segmented_ppl``."""
    scored = []
    with torch.no_grad():
        for ids in seqs:
            nll, n = sequence_nll(model, ids.unsqueeze(0))
            scored.append((float(nll.sum()), int(n.sum())))
    return perplexities(scored)


def unigram_perplexity(train_texts: list[str], tokenizer: PreTrainedTokenizerBase, seqs: list[torch.Tensor]) -> tuple[float, float]:
    """Add-one unigram model of the training tokens, scored like the models on the same predicted tokens."""
    counts: Counter[int] = Counter()
    for text in train_texts:
        counts.update(tokenizer(text, add_special_tokens=False)["input_ids"])
    total, vocab = sum(counts.values()), len(tokenizer)
    logp = torch.tensor([math.log((counts.get(i, 0) + 1) / (total + vocab)) for i in range(vocab)])
    # the models predict tokens 1..L-1
    return perplexities([(float(-logp[ids[1:]].sum()), ids.numel() - 1) for ids in seqs])


def card(name: str, meta: dict[str, Any]) -> str:
    """The model card (README.md) of a mini checkpoint; every number comes from ``meta``."""
    return f"""---
library_name: transformers
tags: [lengthx, paper-b, mini]
---
# {name}

A {meta['params_m']:.2f}M-parameter {meta['family_class']} ({meta['pe']} positions) trained from scratch by
`lengthx` as the offline stand-in for {', '.join(meta['stands_for'])} in paper B (`profile=mini`). It is a
tool for running the harness end to end on a CPU, not a language model of any quality.

- **Data**: the Python standard library's `.py` files of this machine (`{meta['stdlib']}`), one document per
  file, {meta['train_files']} training files; {meta['test_files']} files held out by a hash of their path
  ({TEST_PERCENT}%, the split `lengthx train` and `task=segmented_ppl` use).
- **Tokenizer**: byte-level BPE, {meta['vocab']} entries, trained locally on the training files.
- **Architecture**: width {meta['width']}, {meta['layers']} layers, {meta['heads']} heads; L_t = {meta['l_t']}{meta['arch_note']}.
- **Training**: paper B's DA step (causal LM on one-document L_t pieces, `lengthx train method=da`'s data, AdamW
  and schedule) on the minis' loop (`lengthx.minis`), {meta['steps']} steps of
  {meta['batch_size']} sequences, {meta['tokens']:,} tokens, AdamW lr {meta['lr']} (warm-up, cosine),
  seed {meta['seed']}; {meta['train_seconds'] / 60:.1f} min wall time on {meta['threads']} CPU thread(s)
  ({meta['device']}; the machine was shared with other jobs). Exported in fp16.
- **Held-out perplexity at L_t** ({meta['eval_sequences']} sequences of {meta['l_t']} tokens):
  **{meta['ppl']:.2f}** (mean of per-sequence perplexities; token-weighted {meta['ppl_tokens']:.2f}).
  An add-one unigram model of the training tokens scores **{meta['unigram_ppl']:.2f}**
  (token-weighted {meta['unigram_ppl_tokens']:.2f}) on the same tokens.

Reproduce: `{meta['command']}`
"""


def write_summary(metas: list[dict[str, Any]], path: Path) -> None:
    """``results/mini/minis.md``: the minis' held-out perplexity at L_t against the unigram baseline."""
    rows = ["| mini | stands for | PE | params (M) | steps | tokens | ppl@L_t | unigram ppl |", "|" + "---|" * 8]
    for m in metas:
        rows.append(f"| {m['name']} | {', '.join(m['stands_for'])} | {m['pe']} | {m['params_m']:.2f} | {m['steps']} "
                    f"| {m['tokens']:,} | {m['ppl']:.2f} | {m['unigram_ppl']:.2f} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Decoder-only minis (paper B): held-out perplexity at L_t\n\n"
                    "Written by `scripts/train_mini_decoders.py` from `lengthx/checkpoints/mini-*/lengthx_mini.json`; "
                    "mean of per-sequence perplexities on held-out standard-library files.\n\n" + "\n".join(rows) + "\n")
