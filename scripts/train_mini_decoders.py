"""Pre-train the decoder-only minis of paper B offline: mini-gpt2 (APE), mini-pythia (RoPE), mini-bloom (ALiBi).

Paper B extends GPT-2, Pythia and BLOOM; none can be downloaded here, so ``profile=mini`` maps them onto
small models of the same families trained from scratch on the Python standard library's own source (the
mini corpus of ``lengthx train``; test files held out by a hash of their path, docs/design.md §5). The recipe:

1. a byte-level BPE tokenizer (GPT-2 style, ``--vocab`` entries) trained on the training files only;
2. each model built from its family's config at L_t = ``--l-t`` (APE table / RoPE max positions = L_t) and
   pre-trained with ``lengthx train method=da`` (plain causal LM on one-document L_t pieces: the same loop,
   checkpoints and exact resume as paper B's runs), for ``--steps`` optimizer steps;
3. held-out perplexity at L_t of the exported fp16 weights (``task=segmented_ppl``'s scorer), beside an
   add-one unigram model of the training tokens scored on the same held-out tokens;
4. export: fp16 safetensors, tokenizer, ``lengthx_mini.json`` and a model card into
   ``lengthx/checkpoints/mini-<family>``, plus ``results/mini/minis.md``.

    python scripts/train_mini_decoders.py                  # all three families
    python scripts/train_mini_decoders.py --families pythia --steps 200 --work /tmp/minis --out /tmp/ckpt

Rerunning resumes: the tokenizer and initial weights are reused and training continues from its newest
checkpoint in ``--work``.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lengthx.cli.train import compose_train_config  # noqa: E402
from lengthx.data.corpora import stdlib_documents  # noqa: E402
from lengthx.data.tokenizers import train_bpe_tokenizer  # noqa: E402
from lengthx.segmented.loop import train  # noqa: E402
from lengthx.tasks.segmented_ppl import SegmentedPPLTask, perplexities, sequence_nll  # noqa: E402

# family -> (mini name, the paper model whose config group trains it, PE, paper-B models it stands for)
MINIS = {
    "gpt2": ("mini-gpt2", "gpt2", "APE", ["gpt2", "gpt2-xl"]),
    "pythia": ("mini-pythia", "pythia-160m", "RoPE", ["pythia-160m", "pythia-1.4b"]),
    "bloom": ("mini-bloom", "bloom-1b1", "ALiBi", ["bloom-1b1"]),
}
TEST_PERCENT = 10  # the train/test split of `lengthx train` and `task=segmented_ppl` (data.test_percent)


def half_turn_rope_theta(l_t: int, rotary_dims: int) -> float:
    """The RoPE base whose slowest frequency turns half a circle over L_t: θ_min · L_t = π.

    RoPE's angle θ_i·d between positions d apart has frequencies θ_i = base^(−2i/rotary_dims). Where the slowest
    one has turned less than π by L_t, a head can read it as "older = lower score"; past L_t its cosine turns
    back, far keys score like near ones, and perplexity breaks (paper B Figure 2). Pythia's base 10000 puts
    its slowest used frequencies at 2.05 and 0.65 rad over 2048 tokens, and Pythia breaks just past L_t; at
    L_t = 128 the same base leaves the mini's at 1.28 and 0.13 rad, and it held to 3L_t (measured). This base
    puts the mini's slowest at π rad over L_t (140 for L_t = 128 and 8 rotary dimensions). It is an
    empirical choice for the quarter-rotary mini: a variant rotating every dimension under the same rule
    (base 52) barely degraded past L_t, so the break needs this partial-rotary geometry at this scale.
    """
    return (l_t / math.pi) ** (rotary_dims / (rotary_dims - 2))


def build_model(
    family: str, vocab: int, l_t: int, width: int, layers: int, heads: int, rotary_pct: float = 0.25,
    rope_theta: float | None = None,
) -> torch.nn.Module:
    """A randomly initialised model of ``family`` with its positions sized for L_t, dropout off.

    mini-pythia rotates a quarter of each head's dimensions, as Pythia does (``--rotary-pct``), with the RoPE
    base of :func:`half_turn_rope_theta` unless ``rope_theta`` is given.
    """
    from transformers import (
        BloomConfig,
        BloomForCausalLM,
        GPT2Config,
        GPT2LMHeadModel,
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
    )

    ids = {"vocab_size": vocab, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
    if family == "pythia" and rope_theta is None:
        rope_theta = half_turn_rope_theta(l_t, int(width // heads * rotary_pct))
    if family == "gpt2":
        cfg = GPT2Config(n_embd=width, n_layer=layers, n_head=heads, n_positions=l_t, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, **ids)
        return GPT2LMHeadModel(cfg)
    if family == "pythia":  # GPT-NeoX with Pythia's parallel residual
        cfg = GPTNeoXConfig(hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=4 * width, max_position_embeddings=l_t,
                            rope_parameters={"rope_type": "default", "rope_theta": rope_theta,
                                             "partial_rotary_factor": rotary_pct},
                            use_parallel_residual=True, hidden_dropout=0.0, attention_dropout=0.0,
                            tie_word_embeddings=False, **ids)
        return GPTNeoXForCausalLM(cfg)
    if family == "bloom":
        cfg = BloomConfig(hidden_size=width, n_layer=layers, n_head=heads, hidden_dropout=0.0,
                          attention_dropout=0.0, **ids)
        return BloomForCausalLM(cfg)
    raise ValueError(f"unknown family {family!r}; choose from {', '.join(MINIS)}")


def held_out_sequences(tokenizer, l_t: int, n: int) -> list[torch.Tensor]:
    """``n`` held-out L_t-token sequences, exactly those ``task=segmented_ppl`` scores at its L_t setting."""
    from omegaconf import OmegaConf

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


def unigram_perplexity(train_texts: list[str], tokenizer, seqs: list[torch.Tensor]) -> tuple[float, float]:
    """Add-one unigram model of the training tokens, scored like the models on the same predicted tokens."""
    counts: Counter[int] = Counter()
    for text in train_texts:
        counts.update(tokenizer(text, add_special_tokens=False)["input_ids"])
    total, vocab = sum(counts.values()), len(tokenizer)
    logp = torch.tensor([math.log((counts.get(i, 0) + 1) / (total + vocab)) for i in range(vocab)])
    # the models predict tokens 1..L-1
    return perplexities([(float(-logp[ids[1:]].sum()), ids.numel() - 1) for ids in seqs])


def card(name: str, meta: dict) -> str:
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
- **Training**: `lengthx train method=da` (causal LM on one-document L_t pieces), {meta['steps']} steps of
  {meta['batch_size']} sequences, {meta['tokens']:,} tokens, AdamW lr {meta['lr']} (warm-up, cosine),
  seed {meta['seed']}; {meta['train_seconds'] / 60:.1f} min wall time on {meta['threads']} CPU thread(s)
  ({meta['device']}; the machine was shared with other jobs). Exported in fp16.
- **Held-out perplexity at L_t** ({meta['eval_sequences']} sequences of {meta['l_t']} tokens):
  **{meta['ppl']:.2f}** (mean of per-sequence perplexities; token-weighted {meta['ppl_tokens']:.2f}).
  An add-one unigram model of the training tokens scores **{meta['unigram_ppl']:.2f}**
  (token-weighted {meta['unigram_ppl_tokens']:.2f}) on the same tokens.

Reproduce: `{meta['command']}`
"""


def pretrain(family: str, args: argparse.Namespace, tokenizer, seqs, unigram) -> dict:
    """Train (or resume) one mini, export it and return its card's numbers."""
    from transformers import AutoModelForCausalLM

    name, config_model, pe, stands_for = MINIS[family]
    work = Path(args.work) / name
    init = work / "init"
    if not (init / "config.json").is_file():
        torch.manual_seed(args.seed)
        model = build_model(family, len(tokenizer), args.l_t, args.width, args.layers, args.heads, args.rotary_pct,
                            args.rope_theta)
        model.save_pretrained(init)
        tokenizer.save_pretrained(init)
    cfg = compose_train_config([
        f"model={config_model}", f"model.path={init}", f"model.l_tr={args.l_t}", "method=da", "label=pretrain",
        f"seed={args.seed}", "data.source=stdlib", "data.max_docs=null", f"data.test_percent={TEST_PERCENT}",
        f"train.output_dir={work / 'run'}", f"train.max_steps={args.steps}", f"train.batch_size={args.batch_size}",
        f"train.lr={args.lr}", "train.warmup_ratio=0.05", "train.save_every=250", "train.precision=no",
        "train.budget_fraction=1.0", "train.epochs=null", "train.grad_accum=1",  # not the profile's budget
        f"train.progress={str(not args.quiet).lower()}",
    ])
    start = time.time()
    result = train(cfg)
    seconds = time.time() - start
    if result.final_dir is None:
        raise RuntimeError(f"{name}: training stopped at step {result.step}; rerun to resume")
    previous = work / "seconds.json"  # wall time across resumed invocations
    done = json.loads(previous.read_text()) if previous.is_file() else {"seconds": 0.0, "runs": []}
    if result.resumed_from < result.step:
        done = {"seconds": done["seconds"] + seconds, "runs": done["runs"] + [[result.resumed_from, result.step]]}
        previous.write_text(json.dumps(done))

    out = Path(args.out) / name
    tmp = out.with_name(name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(result.final_dir, dtype=torch.float32, trust_remote_code=False)
    model.to(torch.float16).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    exported = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, trust_remote_code=False).eval()
    ppl, ppl_tokens = perplexity(exported, seqs)
    last = result.curve[-1] if result.curve else {}
    meta = {
        "name": name, "family": str(cfg.model.family), "family_class": type(exported).__name__, "pe": pe,
        "stands_for": stands_for, "l_tr": args.l_t, "l_t": args.l_t, "vocab": len(tokenizer),
        "width": args.width, "layers": args.layers, "heads": args.heads,
        "rope_theta": exported.config.rope_parameters["rope_theta"] if family == "pythia" else None,
        "arch_note": f"; rotary on {args.rotary_pct:.0%} of each head's dimensions (Pythia: 25%), RoPE base "
        f"{exported.config.rope_parameters['rope_theta']:.1f} (slowest frequency turns π over L_t; Pythia: 10000 "
        "at L_t = 2048)"
        if family == "pythia" else "",
        "params_m": sum(p.numel() for p in exported.parameters()) / 1e6,
        "steps": result.step, "tokens": int(last.get("tokens", 0)), "batch_size": args.batch_size,
        "lr": args.lr, "seed": args.seed, "train_seconds": done["seconds"], "threads": torch.get_num_threads(),
        "device": "CPU" if not torch.cuda.is_available() else torch.cuda.get_device_name(),
        "final_loss": last.get("loss"), "eval_sequences": len(seqs), "ppl": ppl, "ppl_tokens": ppl_tokens,
        "unigram_ppl": unigram[0], "unigram_ppl_tokens": unigram[1], **args.corpus,
        "command": "python scripts/train_mini_decoders.py " + " ".join(args.argv),
    }
    (tmp / "lengthx_mini.json").write_text(json.dumps(meta, indent=1))
    (tmp / "README.md").write_text(card(name, meta))
    curve = [{"step": r["step"], "loss": round(float(r["loss"]), 4)} for r in result.curve if r["step"] % 25 == 0]
    (tmp / "curve.json").write_text(json.dumps(curve))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"{name}: held-out ppl@L_t {ppl:.2f} (unigram {unigram[0]:.2f}); {out}", flush=True)
    return meta


def write_summary(metas: list[dict], path: Path) -> None:
    """``results/mini/minis.md``: the minis' held-out perplexity at L_t against the unigram baseline."""
    rows = ["| mini | stands for | PE | params (M) | steps | tokens | ppl@L_t | unigram ppl |", "|" + "---|" * 8]
    for m in metas:
        rows.append(f"| {m['name']} | {', '.join(m['stands_for'])} | {m['pe']} | {m['params_m']:.2f} | {m['steps']} "
                    f"| {m['tokens']:,} | {m['ppl']:.2f} | {m['unigram_ppl']:.2f} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Decoder-only minis (paper B): held-out perplexity at L_t\n\n"
                    "Written by `scripts/train_mini_decoders.py` from `lengthx/checkpoints/mini-*/lengthx_mini.json`; "
                    "mean of per-sequence perplexities on held-out standard-library files.\n\n" + "\n".join(rows) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=list(MINIS), choices=list(MINIS))
    p.add_argument("--l-t", type=int, default=128)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--rotary-pct", type=float, default=0.25, help="mini-pythia: share of each head's dims rotated")
    p.add_argument("--rope-theta", type=float, default=None,
                   help="mini-pythia: RoPE base (default: the slowest rotary frequency turns π over L_t)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--eval-sequences", type=int, default=200)
    p.add_argument("--work", default=str(ROOT / "runs" / "mini-pretrain"))
    p.add_argument("--out", default=str(ROOT / "lengthx" / "checkpoints"))
    p.add_argument("--summary", default=str(ROOT / "results" / "mini" / "minis.md"))
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(args.threads)

    from transformers import AutoTokenizer

    tok_dir = Path(args.work) / "tokenizer"
    train_docs = stdlib_documents("train", TEST_PERCENT)
    test_docs = stdlib_documents("test", TEST_PERCENT)
    import sysconfig

    args.corpus = {"stdlib": sysconfig.get_paths()["stdlib"], "train_files": len(train_docs),
                   "test_files": len(test_docs)}
    if (tok_dir / "tokenizer.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(tok_dir, trust_remote_code=False)
    else:
        tokenizer = train_bpe_tokenizer(iter(train_docs["text"]), args.vocab)
        tokenizer.save_pretrained(tok_dir)
    seqs = held_out_sequences(tokenizer, args.l_t, args.eval_sequences)
    unigram = unigram_perplexity(train_docs["text"], tokenizer, seqs)
    metas = [pretrain(f, args, tokenizer, seqs, unigram) for f in args.families]
    done = {m["name"]: m for m in metas}
    for name, *_rest in MINIS.values():  # keep the other minis' lines in the summary
        meta_file = Path(args.out) / name / "lengthx_mini.json"
        if name not in done and meta_file.is_file():
            done[name] = json.loads(meta_file.read_text())
    write_summary([done[n] for n, *_ in MINIS.values() if n in done], Path(args.summary))


if __name__ == "__main__":
    main()
