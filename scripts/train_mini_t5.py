#!/usr/bin/env python
"""Train mini-t5: a small T5 (learned relative position buckets) that retrieves at its training length.

docs/design.md §4: paper A's phenomenon only means something on a T5 that solves passkey and line
retrieval at L_tr. This script trains one from scratch, offline, on a mixture of

* passkey prompts (``lengthx.tasks.passkey``, Landmark Attention format) of about 55..L_tr tokens,
* LongEval lines prompts (``lengthx.tasks.lines``, docs/design.md §10) with as many lines as fit in L_tr tokens,
* a prefix-LM objective on the Python standard library's own source (encoder: a prefix, decoder: the
  next ``--lm-target`` tokens), so the model is also a small T5-LM,

all generated on the fly in DataLoader workers. The tokenizer (``lengthx.data.tokenizers``) keeps numbers
in pieces of at most three digits, which the decoder copies far more easily than single digits.

Runs on CPU or GPU (bf16 autocast and TF32 there). Training is time-boxed (``--max-minutes``, cumulative
over resumes) and step-boxed (``--max-steps``); the learning rate warms up, stays flat and decays linearly
over the last ``--decay-frac`` of whichever box binds first. ``--out`` holds ``state.pt`` (model, optimizer,
step, curve), ``curve.json`` and ``export/`` (fp16 safetensors + tokenizer + model card); rerunning the
same command resumes from ``state.pt``. ``--init-from DIR`` warm-starts from exported weights instead.

Example (the command used for the shipped checkpoint is in its model card):

    python scripts/train_mini_t5.py --out runs/mini-t5 --tokenizer lengthx/checkpoints/mini-t5 \\
        --max-minutes 18 --batch-size 256 --export lengthx/checkpoints/mini-t5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from transformers import AutoTokenizer, PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration  # noqa: E402

from lengthx.data.corpora import stdlib_files  # noqa: E402
from lengthx.data.fitting import bisect_largest  # noqa: E402
from lengthx.data.tokenizers import digit_pieces, is_single_token, train_tokenizer  # noqa: E402
from lengthx.tasks.lines import LinesCase, fit_lines_case, line_index_vocabulary, lines_case  # noqa: E402
from lengthx.tasks.passkey import case_prompt, passkey_cases, passkey_prompt  # noqa: E402

TASKS = ("passkey", "lines", "lm")
_INT = re.compile(r"\d+")


# ----------------------------------------------------------------------------------------------- helpers
def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def first_int(text: str) -> int | None:
    found = _INT.findall(text)
    return int(found[0]) if found else None


def last_int(text: str) -> int | None:
    found = _INT.findall(text)
    return int(found[-1]) if found else None




def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


# ------------------------------------------------------------------------------------------- tokenizer
def tokenizer_corpus(seed: int, n_passkey: int = 2000, n_lines: int = 4000) -> Iterator[str]:
    """Training text of the tokenizer: generated task prompts (many lines, to cover the index words) and
    the standard library's source."""
    rng = random.Random(f"tokenizer:{seed}")
    for _ in range(n_passkey):
        g = rng.randint(0, 2000)
        yield passkey_prompt(rng.randint(1, 50000), g, rng.randint(0, g))
    for _ in range(n_lines):
        yield lines_case(rng.randint(1, 30), rng).prompt
    for path in stdlib_files(rule="no-tests"):
        yield read_text(path)


def get_tokenizer(path: Path, vocab_size: int, seed: int) -> PreTrainedTokenizerFast:
    """Load the tokenizer saved in ``path``, or train one (see ``tokenizer_corpus``) and save it there."""
    if (path / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(path))
    log(f"training a {vocab_size}-piece tokenizer -> {path}")
    tok = train_tokenizer(tokenizer_corpus(seed), vocab_size)
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(path))
    missing = [p for p in digit_pieces(3) if not is_single_token(tok, p)]
    if missing:
        raise RuntimeError(f"number pieces that are not single tokens: {missing[:10]}")
    return AutoTokenizer.from_pretrained(str(path))


# ------------------------------------------------------------------------------------------------ data
def lm_stream(tok: PreTrainedTokenizerFast, max_tokens: int) -> np.ndarray:
    """The standard library's source as one token stream (files separated by ``</s>``)."""
    files = stdlib_files(rule="no-tests")
    ids: list[np.ndarray] = []
    total = 0
    for i in range(0, len(files), 64):
        texts = [read_text(p) for p in files[i : i + 64]]
        for row in tok.backend_tokenizer.encode_batch(texts):
            arr = np.asarray(row.ids, dtype=np.int32)
            if len(arr):
                ids.append(arr)
                total += len(arr)
        if total >= max_tokens:
            break
    return np.concatenate(ids)[:max_tokens]


class TaskSampler:
    """Draws training examples of each task with its own ``random.Random``; all lengths <= ``l_tr``."""

    def __init__(self, tok: PreTrainedTokenizerFast, args: argparse.Namespace, stream: np.ndarray, rng: random.Random):
        self.tok = tok.backend_tokenizer
        self.args = args
        self.stream = stream
        self.rng = rng
        self.eos = tok.eos_token_id
        self.g_max = max_garbage(tok, args.l_tr)
        self.overhead = len(self.encode(lines_case(1, random.Random(0)).prompt)) - 17  # header + question
        w = np.asarray([args.w_passkey, args.w_lines, args.w_lm], dtype=float)
        self.weights = (w / w.sum()).tolist()

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text).ids  # </s> appended by the post-processor

    def passkey(self, ramp: float) -> tuple[list[int], str]:
        rng = self.rng
        n_garbage = rng.randint(0, int(self.g_max * (0.25 + 0.75 * ramp)))
        key = rng.randint(1, 50000)
        ids = self.encode(passkey_prompt(key, n_garbage, rng.randint(0, n_garbage)))
        while len(ids) > self.args.l_tr:  # rare: the filler cut fell unluckily
            n_garbage = int(n_garbage * 0.95)
            ids = self.encode(passkey_prompt(key, n_garbage, rng.randint(0, n_garbage)))
        return ids, str(key)

    def lines(self, ramp: float) -> tuple[list[int], str]:
        """A share ``lines_full_frac`` of the records start with ``lines_max`` lines (then trimmed to fit, i.e.
        full length), the rest with a uniform 1..``lines_max``; random non-asked lines are dropped until the
        prompt fits L_tr."""
        rng, a = self.rng, self.args
        hi = max(2, round(2 + ramp * (a.lines_max - 2)))
        case = lines_case(hi if rng.random() < a.lines_full_frac else rng.randint(1, hi), rng)
        pairs, query = list(case.pairs), case.query_idx
        ids = self.encode(case.prompt)
        while len(ids) > a.l_tr:
            # the asked line's rank among the kept lines stays uniform
            per_line = max(8.0, (len(ids) - self.overhead) / len(pairs))
            others = [i for i, (idx, _) in enumerate(pairs) if idx != query]
            n_drop = min(len(others), max(1, math.ceil((len(ids) - a.l_tr) / per_line)))
            drop = set(rng.sample(others, n_drop))
            pairs = [p for i, p in enumerate(pairs) if i not in drop]
            asked = next(i for i, (idx, _) in enumerate(pairs) if idx == query)
            ids = self.encode(LinesCase(pairs=tuple(pairs), query=asked).prompt)
        return ids, str(case.answer)

    def lm(self) -> tuple[list[int], list[int]]:
        rng, a = self.rng, self.args
        start = rng.randrange(0, len(self.stream) - a.l_tr - a.lm_target - 1)
        n_prefix = rng.randint(16, a.l_tr - 1)
        src = self.stream[start : start + n_prefix].tolist() + [self.eos]
        tgt = self.stream[start + n_prefix : start + n_prefix + a.lm_target].tolist()
        return src, tgt

    def batch(self, size: int, ramp: float) -> dict[str, torch.Tensor]:
        a = self.args
        kinds = self.rng.choices(range(3), weights=self.weights, k=size)
        t_dec = max(a.lm_target, 8)
        input_ids = torch.zeros(size, a.l_tr, dtype=torch.long)
        attention = torch.zeros(size, a.l_tr, dtype=torch.long)
        labels = torch.full((size, t_dec), -100, dtype=torch.long)
        for i, k in enumerate(kinds):
            if k == 2:
                src, tgt = self.lm()
            else:
                src, answer = self.passkey(ramp) if k == 0 else self.lines(ramp)
                tgt = self.encode(answer)  # "▁" + number pieces + "</s>"
            src, tgt = src[: a.l_tr], tgt[:t_dec]
            input_ids[i, : len(src)] = torch.tensor(src)
            attention[i, : len(src)] = 1
            labels[i, : len(tgt)] = torch.tensor(tgt)
        return {"input_ids": input_ids, "attention_mask": attention, "labels": labels,
                "task": torch.tensor(kinds, dtype=torch.long)}


class TrainStream(torch.utils.data.IterableDataset):
    """Endless batches; each DataLoader worker has its own seeded generator (distinct from eval seeds)."""

    def __init__(self, tok: PreTrainedTokenizerFast, args: argparse.Namespace, stream: np.ndarray, start_step: int):
        self.tok, self.args, self.stream, self.start_step = tok, args, stream, start_step

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        rng = random.Random(f"train:{self.args.seed}:{self.start_step}:{wid}")
        sampler = TaskSampler(self.tok, self.args, self.stream, rng)
        produced = 0
        while True:
            step = self.start_step + produced * nw + wid
            ramp = 1.0 if self.args.curriculum_steps <= 0 else min(1.0, step / self.args.curriculum_steps)
            yield sampler.batch(self.args.batch_size, ramp)
            produced += 1


# ------------------------------------------------------------------------------------------- eval sets
def max_garbage(tok: PreTrainedTokenizerFast, l_tr: int) -> int:
    """Largest filler size whose passkey prompt (5-digit key, key in the middle) fits ``l_tr`` tokens."""
    return bisect_largest(lambda g: len(tok(passkey_prompt(50000, g, g // 2)).input_ids) <= l_tr, 0, 64 * l_tr)


def passkey_eval_set(tok: PreTrainedTokenizerFast, n: int, seed: int, length: int) -> list[tuple[str, int]]:
    """``n`` passkey prompts (``passkey_cases(n, seed)``) each fitted to at most ``length`` tokens."""
    out = []
    for case in passkey_cases(n, seed):
        lo = bisect_largest(lambda g, c=case: len(tok(case_prompt(c, g)).input_ids) <= length, 0, 64 * length)
        out.append((case_prompt(case, lo), case.key))
    return out


def lines_eval_set(tok: PreTrainedTokenizerFast, n: int, seed: int, length: int) -> list[tuple[str, int]]:
    """``n`` lines prompts (case seeds ``seed``, ``seed+1``, …) with as many lines as fit ``length`` tokens."""
    out = []
    for i in range(n):
        case = fit_lines_case(seed + i, lambda s: len(tok(s).input_ids), length, max_lines=4 * length)
        out.append((case.prompt, case.answer))
    return out


@torch.no_grad()
def generate(model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast, prompts: list[str],
             max_new_tokens: int = 8, batch_size: int = 64) -> list[str]:
    """Greedy decoding, batched."""
    device = next(model.parameters()).device
    out: list[str] = []
    for i in range(0, len(prompts), batch_size):
        enc = tok(prompts[i : i + batch_size], return_tensors="pt", padding=True).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
        out.extend(tok.batch_decode(ids, skip_special_tokens=True))
    return out


def exact_match(model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast, data: list[tuple[str, int]],
                rule: Callable[[str], int | None]) -> tuple[float, list[str]]:
    outs = generate(model, tok, [p for p, _ in data])
    return 100.0 * float(np.mean([rule(o) == a for o, (_, a) in zip(outs, data, strict=True)])), outs


def evaluate(model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast,
             sets: dict[str, list[tuple[str, int]]]) -> dict[str, float]:
    was_training = model.training
    model.eval()
    res = {}
    for name, data in sets.items():
        rule = first_int if name.startswith("passkey") else last_int
        res[name], _ = exact_match(model, tok, data, rule)
    model.train(was_training)
    return res


# ----------------------------------------------------------------------------------------------- model
def build_model(args: argparse.Namespace, tok: PreTrainedTokenizerFast) -> T5ForConditionalGeneration:
    config = T5Config(
        vocab_size=len(tok),
        d_model=args.d_model,
        d_kv=args.d_kv,
        d_ff=args.d_ff,
        num_layers=args.enc_layers,
        num_decoder_layers=args.dec_layers,
        num_heads=args.heads,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=args.max_distance,
        dropout_rate=0.0,
        feed_forward_proj=args.ff_proj,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    model = T5ForConditionalGeneration(config)
    model.generation_config.decoder_start_token_id = tok.pad_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def example_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example mean token cross-entropy (so each task weighs by its share of examples, not tokens)."""
    tok_loss = F.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=-100, reduction="none")
    mask = (labels != -100).float()
    return (tok_loss * mask).sum(1) / mask.sum(1).clamp(min=1)


def lr_at(step: int, progress: float, args: argparse.Namespace) -> float:
    """Warm-up, flat, then linear decay to zero over the last ``decay_frac`` of the run's progress."""
    warm = min(1.0, (step + 1) / max(1, args.warmup))
    tail = 1.0 if progress < 1 - args.decay_frac else max(0.0, (1 - progress) / args.decay_frac)
    return args.lr * warm * tail


def export(model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast, path: Path) -> None:
    """fp16 safetensors + config + tokenizer in ``path`` (loadable by ``from_pretrained``)."""
    path.mkdir(parents=True, exist_ok=True)
    half = T5ForConditionalGeneration(model.config)
    half.load_state_dict({k: v.detach().float().cpu() for k, v in model.state_dict().items()})
    half.generation_config = model.generation_config
    half.half().save_pretrained(str(path))
    tok.save_pretrained(str(path))


def model_card(args: argparse.Namespace, model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast,
               state: dict[str, Any], final: dict[str, float], hardware: str) -> str:
    n_params = sum(p.numel() for p in model.parameters())
    c = model.config
    curve_rows = "\n".join(
        f"| {r['step']} | {r['minutes']:.1f} | {r.get('passkey', float('nan')):.0f} | {r.get('lines', float('nan')):.0f} |"
        for r in state["curve"]
    )
    final_rows = "\n".join(f"| {k} | {v:.0f} |" for k, v in final.items())
    return f"""# mini-t5

A small T5 (`T5ForConditionalGeneration`, learned relative position buckets) trained from scratch,
offline, by `scripts/train_mini_t5.py` for lengthx: it stands in for Flan-T5 / T5-LM in paper A's
experiments in the `mini` profile. Its training length is **L_tr = {args.l_tr} tokens**; with
`relative_attention_max_distance = {c.relative_attention_max_distance}` (<= L_tr/2) longer inputs add no
new position bucket, so beyond L_tr only the attention's dispersal changes.

## Architecture
- {n_params / 1e6:.2f}M parameters, d_model {c.d_model}, {c.num_heads} heads x d_kv {c.d_kv}, d_ff {c.d_ff}
  ({c.feed_forward_proj}), {c.num_layers} encoder / {c.num_decoder_layers} decoder layers, tied embeddings,
  {c.relative_attention_num_buckets} buckets, max distance {c.relative_attention_max_distance}.
- Tokenizer: {len(tok)}-piece Unigram trained locally (`lengthx.data.tokenizers.train_tokenizer`) on the
  Python standard library's source and generated task prompts; numbers are cut into pieces of at most 3
  digits (every 1-3 digit piece is one token), newlines are tokens; `<pad>`=0 (decoder start), `</s>`=1
  (appended to inputs), `<unk>`=2.
- Weights stored in fp16 (safetensors). Load with `T5ForConditionalGeneration.from_pretrained(dir)`
  (pass `dtype=torch.float32` on CPU) and `AutoTokenizer.from_pretrained(dir)`.

## Training data (generated on the fly, all inputs <= L_tr tokens)
- passkey (`lengthx.tasks.passkey` format, keys 1..50000, filler 0..{state['g_max']} characters, key depth
  uniform), weight {args.w_passkey};
- LongEval lines (`lengthx.tasks.lines`, docs/design.md §10; wonderwords adjective-noun indices, values
  1..50000, asked line uniform), 1..{args.lines_max} lines drawn then random non-asked lines dropped until the
  prompt fits L_tr, weight {args.w_lines};
- prefix-LM on the standard library's source (prefix 16..L_tr-1 tokens, the next {args.lm_target} tokens
  as target), weight {args.w_lm}.
- Loss: per-example mean token cross-entropy; AdamW lr {args.lr} (betas 0.9/0.98, wd 0.01), warm-up
  {args.warmup} steps, linear decay over the last {args.decay_frac:.0%}; batch {args.batch_size}; curriculum
  ramp of filler size and line count over the first {args.curriculum_steps} steps; seed {args.seed}.
- **{state['step']} steps, {state['train_seconds'] / 60:.1f} minutes of training on {hardware}.**

## Accuracy (exact match, %, greedy decoding)
Held-out examples generated with seeds disjoint from the training stream (passkey cases
`passkey_cases(n, {args.final_seed})`, lines cases seeds {args.final_seed + 10_000}+), each fitted to the given
token length with this tokenizer, measured on the exported fp16 weights loaded in fp32:

| set | EM % |
|---|---|
{final_rows}

Training curve (eval sets of {args.eval_n} examples at L_tr, seeds {args.eval_seed} / {args.eval_seed + 10_000}+):

| step | minutes | passkey | lines |
|---|---|---|---|
{curve_rows}

`curve.json` holds the same curve with the training losses per task.

## Reproduce
```
{state['command']}
```
The run is time-boxed: on other hardware pass `--max-steps {state['step']} --max-minutes 0` for the same
number of steps (data order differs with the number of DataLoader workers). The tokenizer directory given by
`--tokenizer` is reused when it exists; delete it to retrain the tokenizer (about a minute on a CPU).
"""


# ------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="run directory (state.pt, curve.json, export/)")
    p.add_argument("--tokenizer", type=Path, default=ROOT / "lengthx/checkpoints/mini-t5",
                   help="tokenizer directory: loaded if it holds tokenizer.json, else trained and saved there")
    p.add_argument("--export", type=Path, default=None, help="also export the final model (+ card) here")
    p.add_argument("--init-from", type=Path, default=None, help="warm start from exported weights (no optimizer)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--l-tr", type=int, default=256)
    p.add_argument("--max-distance", type=int, default=128)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--d-kv", type=int, default=32)
    p.add_argument("--d-ff", type=int, default=768)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--enc-layers", type=int, default=6)
    p.add_argument("--dec-layers", type=int, default=4)
    p.add_argument("--ff-proj", default="gated-gelu")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--decay-frac", type=float, default=0.2)
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--max-minutes", type=float, default=10.0, help="cumulative training time box (0: none)")
    p.add_argument("--curriculum-steps", type=int, default=1000)
    p.add_argument("--w-passkey", type=float, default=0.25)
    p.add_argument("--w-lines", type=float, default=0.55)
    p.add_argument("--w-lm", type=float, default=0.20)
    p.add_argument("--lines-max", type=int, default=8, help="most lines drawn before fitting to L_tr")
    p.add_argument("--lines-full-frac", type=float, default=0.5, help="share of full-length lines records")
    p.add_argument("--lm-target", type=int, default=32)
    p.add_argument("--lm-tokens", type=int, default=4_000_000, help="stdlib tokens kept for the LM stream")
    p.add_argument("--workers", type=int, default=max(0, min(12, (os.cpu_count() or 2) - 2)))
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--eval-n", type=int, default=100)
    p.add_argument("--eval-seed", type=int, default=10_000)
    p.add_argument("--final-n", type=int, default=50)
    p.add_argument("--final-seed", type=int, default=500_000)
    p.add_argument("--final-lengths", default="256,512,1024", help="token lengths of the final evaluation")
    p.add_argument("--save-every-minutes", type=float, default=3.0)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (GPU)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    command = "python scripts/train_mini_t5.py " + " ".join(sys.argv[1:] if argv is None else argv)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    args.out.mkdir(parents=True, exist_ok=True)

    tok = get_tokenizer(args.tokenizer, args.vocab_size, args.seed)
    model = build_model(args, tok)
    if args.init_from is not None:
        src = T5ForConditionalGeneration.from_pretrained(str(args.init_from), dtype=torch.float32)
        model.load_state_dict(src.state_dict())
        log(f"warm start from {args.init_from}")
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"device {hardware}; {n_params / 1e6:.2f}M params; vocab {len(tok)}; L_tr {args.l_tr}; line indices from "
        + " x ".join(f"{len(w)}" for w in line_index_vocabulary()) + " adjectives x nouns")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01,
                            fused=device.type == "cuda")

    state: dict[str, Any] = {"step": 0, "train_seconds": 0.0, "curve": [], "command": command}
    ckpt = args.out / "state.pt"
    if ckpt.exists():
        saved = torch.load(ckpt, map_location="cpu", weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        state["command"] = command
        log(f"resumed from {ckpt} at step {state['step']} ({state['train_seconds'] / 60:.1f} min)")
    state["g_max"] = max_garbage(tok, args.l_tr)

    eval_sets = {
        "passkey": passkey_eval_set(tok, args.eval_n, args.eval_seed, args.l_tr),
        "lines": lines_eval_set(tok, args.eval_n, args.eval_seed + 10_000, args.l_tr),
    }
    log(f"eval sets ready; passkey filler max {state['g_max']} chars at L_tr; "
        f"lines per eval prompt {np.mean([p.count(chr(10) + 'line ') for p, _ in eval_sets['lines']]):.1f}")

    t0 = time.time()
    stream = lm_stream(tok, args.lm_tokens)
    log(f"LM stream: {len(stream)} tokens from the standard library ({time.time() - t0:.0f}s)")
    loader = torch.utils.data.DataLoader(
        TrainStream(tok, args, stream, state["step"]), batch_size=None, num_workers=args.workers,
        pin_memory=device.type == "cuda", prefetch_factor=4 if args.workers else None,
        persistent_workers=False,
    )
    fwd = torch.compile(model) if args.compile else model

    def save() -> None:
        tmp = args.out / "state.pt.tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, tmp)
        os.replace(tmp, ckpt)
        (args.out / "curve.json").write_text(json.dumps(state["curve"], indent=1))
        export(model, tok, args.out / "export")

    def progress() -> float:
        p = state["step"] / args.max_steps
        if args.max_minutes > 0:
            p = max(p, state["train_seconds"] / (60 * args.max_minutes))
        return p

    def record_eval(extra: dict[str, float]) -> None:
        res = evaluate(model, tok, eval_sets)
        row = {"step": state["step"], "minutes": state["train_seconds"] / 60, **res, **extra}
        state["curve"].append(row)
        log(f"eval step {state['step']}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items() if k != "step"))

    model.train()
    sums = torch.zeros(3, device=device)
    counts = torch.zeros(3, device=device)
    last_save = time.time()
    tick = time.time()
    it = iter(loader)
    while progress() < 1:
        batch = next(it)
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        lr = lr_at(state["step"], progress(), args)
        for group in opt.param_groups:
            group["lr"] = lr
        labels = batch["labels"]
        dec_in = labels.new_zeros(labels.shape)
        dec_in[:, 1:] = labels[:, :-1].clamp(min=0)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = fwd(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         decoder_input_ids=dec_in).logits
        per_ex = example_loss(logits, labels)
        loss = per_ex.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sums.index_add_(0, batch["task"], per_ex.detach())
        counts.index_add_(0, batch["task"], torch.ones_like(per_ex))
        state["step"] += 1
        now = time.time()
        state["train_seconds"] += now - tick
        tick = now
        step = state["step"]
        if step % args.log_every == 0:
            means = (sums / counts.clamp(min=1)).tolist()
            losses = {f"loss_{t}": round(v, 4) for t, v in zip(TASKS, means, strict=True)}
            log(f"step {step} lr {lr:.2e} " + " ".join(f"{k} {v:.3f}" for k, v in losses.items())
                + f" | {state['train_seconds'] / step if step else 0:.3f}s/step")
            state["last_losses"] = losses
            sums.zero_()
            counts.zero_()
        if step % args.eval_every == 0:
            record_eval(state.get("last_losses", {}))
            tick = time.time()  # evaluation time is not training time
        if now - last_save > 60 * args.save_every_minutes:
            save()
            last_save = tick = time.time()
    if not state["curve"] or state["curve"][-1]["step"] != state["step"]:
        record_eval(state.get("last_losses", {}))
    save()
    log(f"done: {state['step']} steps, {state['train_seconds'] / 60:.1f} min of training")
    del it, loader

    # final held-out evaluation on the exported fp16 weights, loaded as a user would
    exported = args.out / "export"
    final_model = T5ForConditionalGeneration.from_pretrained(str(exported), dtype=torch.float32).to(device).eval()
    final: dict[str, float] = {}
    samples: dict[str, list[str]] = {}
    for length in [int(x) for x in args.final_lengths.split(",") if x]:
        pk = passkey_eval_set(tok, args.final_n, args.final_seed, length)
        final[f"passkey@{length}"], samples[f"passkey@{length}"] = exact_match(final_model, tok, pk, first_int)
        ln = lines_eval_set(tok, args.final_n, args.final_seed + 10_000, length)
        final[f"lines@{length}"], samples[f"lines@{length}"] = exact_match(final_model, tok, ln, last_int)
        log(f"final @ {length} tokens: passkey {final[f'passkey@{length}']:.0f}%, lines {final[f'lines@{length}']:.0f}%")
    state["final"] = final
    (args.out / "final.json").write_text(json.dumps({"final": final, "samples": samples}, indent=1))
    card = model_card(args, model, tok, state, final, hardware)
    summary = json.dumps({"l_tr": args.l_tr, "steps": state["step"], "train_minutes": state["train_seconds"] / 60,
                          "hardware": hardware, "command": command, "final": final, "curve": state["curve"]},
                         indent=1)
    for target in [exported] + ([args.export] if args.export is not None else []):
        if target != exported:
            export(model, tok, target)
        (target / "README.md").write_text(card)
        (target / "curve.json").write_text(summary)
        log(f"exported to {target}")


if __name__ == "__main__":
    main()
