"""The T5-LM stand-in's data (docs/mini-t5-lm.md): the standard library's own source as the ``lm`` and
``code_completion`` tasks read it, minus the files held out by a hash of their path
(:func:`lengthx.data.splits.is_test_document`, 10%), tokenised once into one token stream; batch ``k`` is sliced
from it by a generator seeded by ``(seed, k)``: the encoder reads the ``L_tr - 1`` tokens before a random split
point and ``</s>`` (exactly L_tr tokens, as T5's packed 512-token inputs), the decoder predicts the next
``target`` tokens (paper A Table 3's T5-LMs, prefix language modelling)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from lengthx.data.corpora import stdlib_sources
from lengthx.data.splits import is_test_document

TEST_PERCENT = 10.0


def corpus(split: str) -> list[tuple[str, str]]:
    """(path, source) of the standard library files of ``split`` ("train" or "test"), as the tasks read them."""
    return [(p, t) for p, t in stdlib_sources() if is_test_document(p, TEST_PERCENT) == (split == "test")]


def token_stream(tok: PreTrainedTokenizerBase, docs: list[tuple[str, str]], cache: Path) -> np.ndarray:
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


def held_out_loss(model: torch.nn.Module, stream: np.ndarray, args: argparse.Namespace, eos: int, n: int = 64) -> float:
    """Mean token NLL on ``n`` fixed windows of the held-out stream (the curve's validation loss)."""
    sub = argparse.Namespace(**{**vars(args), "batch_size": n, "seed": args.seed + 1_000_003})
    b = batch(stream, 0, sub, eos)
    model.eval()
    with torch.no_grad():
        loss = float(model(**b).loss)
    model.train()
    return loss
