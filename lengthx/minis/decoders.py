"""The decoder minis' recipe (paper B, ``profile=mini``; docs/design.md §5): mini-gpt2 (APE), mini-pythia (RoPE)
and mini-bloom (ALiBi), pre-trained offline on the one loop of :mod:`lengthx.minis.loop`.

Paper B extends GPT-2, Pythia and BLOOM; none can be downloaded here, so ``profile=mini`` maps them onto small
models of the same families trained from scratch on the Python standard library's own source (test files held
out by a hash of their path). The recipe:

1. a byte-level BPE tokenizer (GPT-2 style, ``--vocab`` entries) trained on the training files only;
2. each model built from its family's config at L_t = ``--l-t`` (APE table / RoPE max positions = L_t), saved
   as ``init`` and loaded as ``lengthx train`` loads a model; each step is paper B's DA step
   (:mod:`lengthx.segmented`: one-document L_t pieces in the run's seeded order, causal LM loss, AdamW without
   decay on biases and norms, linear warm-up and cosine decay) for ``--steps`` optimizer steps;
3. held-out perplexity at L_t of the exported fp16 weights and the card (:mod:`lengthx.minis.decoders_card`);
4. export: fp16 safetensors, tokenizer, ``lengthx_mini.json``, ``curve.json`` and the card into
   ``lengthx/checkpoints/mini-<family>``, plus ``results/mini/minis.md``.

Entry point: ``python scripts/train_mini_decoders.py`` (its ``--help`` lists every option). Rerunning resumes:
the tokenizer and initial weights are reused and training continues from ``state.pt`` in ``--work``.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BloomConfig,
    BloomForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    PreTrainedTokenizerBase,
)

from lengthx.data.corpora import stdlib_documents
from lengthx.data.pieces import piece_dataset
from lengthx.data.tokenizers import train_bpe_tokenizer
from lengthx.minis.decoders_card import (
    TEST_PERCENT,
    card,
    held_out_sequences,
    perplexity,
    unigram_perplexity,
    write_summary,
)
from lengthx.minis.export import export_fp16
from lengthx.minis.loop import Box, TrainingLoop
from lengthx.models.minis import compose_train
from lengthx.segmented.loop import WarmupCosine, build_optimizer, causal_lm_loss, load_for_training, plan_for
from lengthx.segmented.models import prepare_for_length, segmented_forward
from lengthx.segmented.plan import SequenceOrder, micro_batch_indices, resolve_run
from lengthx.segmented.sampling import collate_segmented, sample_generator

REPO = Path(__file__).resolve().parents[2]  # the checkout the entry point scripts/train_mini_decoders.py runs from
# family -> (mini name, the paper model whose config group trains it, PE, paper-B models it stands for)
MINIS = {
    "gpt2": ("mini-gpt2", "gpt2", "APE", ["gpt2", "gpt2-xl"]),
    "pythia": ("mini-pythia", "pythia-160m", "RoPE", ["pythia-160m", "pythia-1.4b"]),
    "bloom": ("mini-bloom", "bloom-1b1", "ALiBi", ["bloom-1b1"]),
}


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


class DecoderRecipe:
    """One decoder mini on :class:`lengthx.minis.loop.TrainingLoop`: paper B's DA step from ``init``."""

    def __init__(self, family: str, args: argparse.Namespace, tokenizer: PreTrainedTokenizerBase) -> None:
        from accelerate.utils import set_seed

        name, config_model, _pe, _stands_for = MINIS[family]
        self.work = Path(args.work) / name
        init = self.work / "init"
        if not (init / "config.json").is_file():
            torch.manual_seed(args.seed)
            model = build_model(family, len(tokenizer), args.l_t, args.width, args.layers, args.heads,
                                args.rotary_pct, args.rope_theta)
            model.save_pretrained(init)
            tokenizer.save_pretrained(init)
        self.cfg = cfg = compose_train([
            f"model={config_model}", f"model.path={init}", f"model.l_tr={args.l_t}", "method=da", "start=pretrained",
            "label=pretrain", f"seed={args.seed}", "data.source=stdlib", "data.max_docs=null",
            f"data.test_percent={TEST_PERCENT}", f"train.output_dir={self.work / 'train'}",
            f"train.max_steps={args.steps}", f"train.batch_size={args.batch_size}", f"train.lr={args.lr}",
            "train.warmup_ratio=0.05", "train.precision=no", "train.budget_fraction=1.0", "train.epochs=null",
            "train.grad_accum=1",  # not the profile's budget
        ])
        self.spec, tc, self.seed = resolve_run(cfg), cfg.train, int(cfg.seed)
        set_seed(self.seed)  # as `lengthx train` seeds before it loads the model
        self.model, self.tokenizer = load_for_training(cfg.model, tc.get("attn_implementation"))
        prepare_for_length(self.model, str(cfg.model.family), self.spec.l_e)
        self.pieces = piece_dataset(cfg.data, self.tokenizer, "train",
                                    self.spec.method.source_length(self.spec.l_t, self.spec.l_e), "mini")
        self.plan = plan_for(cfg, self.spec, len(self.pieces), 1)
        self.optimizer = build_optimizer(self.model, float(tc.lr), float(tc.weight_decay),
                                         (float(tc.betas[0]), float(tc.betas[1])), float(tc.get("eps", 1e-8)))
        self.base_lr = float(tc.lr)
        self.schedule = WarmupCosine(self.plan.warmup_steps, self.plan.steps, float(tc.get("min_lr_ratio", 0.1)))
        self.order = SequenceOrder(self.seed, self.plan.pieces)
        self.batch_size = int(tc.batch_size)
        self.log_every = args.log_every

    def lr(self, loop: TrainingLoop) -> float:
        return self.base_lr * self.schedule(loop.step)

    def loss(self, step: int) -> torch.Tensor:
        idx = micro_batch_indices(step, 0, 0, self.batch_size, 1, 1)
        rows = self.pieces[[self.order(k) for k in idx]]["input_ids"].long()
        batch = collate_segmented(list(rows), self.spec.method, self.spec.l_t, [sample_generator(self.seed, k) for k in idx])
        out = segmented_forward(self.model, batch["input_ids"], batch["position_ids"], batch["attention_mask"])
        loss = causal_lm_loss(out.logits, batch["labels"])
        self._loss = float(loss.detach())
        return loss

    def after_step(self, loop: TrainingLoop) -> None:
        loop.state["last_loss"] = round(self._loss, 6)  # as metrics.jsonl of `lengthx train`
        if loop.step % self.log_every == 0:
            loop.state["curve"].append({"step": loop.step, "loss": round(round(self._loss, 6), 4)})

    def state_parts(self) -> dict[str, Any]:
        return {}  # batch k is drawn from the run's seeded order: nothing beside the weights and optimizer

    def load_state_parts(self, saved: dict[str, Any]) -> None:
        pass


def pretrain(family: str, args: argparse.Namespace, tokenizer: PreTrainedTokenizerBase, seqs: list[torch.Tensor],
             unigram: tuple[float, float]) -> dict[str, Any] | None:
    """Train (or resume) one mini, export it and return its card's numbers (None: stopped at ``--stop-step``)."""
    name, _config_model, pe, stands_for = MINIS[family]
    recipe = DecoderRecipe(family, args, tokenizer)
    loop = TrainingLoop(recipe.work / "train", recipe.model, recipe.optimizer, recipe,
                        Box(recipe.plan.steps, stop_step=args.stop_step, save_every_steps=250),
                        {"step": 0, "seconds": 0.0, "curve": []})
    loop.resume()
    loop.run()
    if args.stop_step is not None and loop.step == args.stop_step < recipe.plan.steps:
        print(f"{name}: stopped at step {loop.step} (--stop-step); rerun without it to resume", flush=True)
        return None
    if loop.step < recipe.plan.steps:
        raise RuntimeError(f"{name}: training stopped at step {loop.step}; rerun to resume")
    out = Path(args.out) / name
    tmp = out.with_name(name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    export_fp16(recipe.model, tokenizer, tmp)
    exported = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, trust_remote_code=False).eval()
    ppl, ppl_tokens = perplexity(exported, seqs)
    theta = exported.config.rope_parameters["rope_theta"] if family == "pythia" else None
    meta = {
        "name": name, "family": str(recipe.cfg.model.family), "family_class": type(exported).__name__, "pe": pe,
        "stands_for": stands_for, "l_tr": args.l_t, "l_t": args.l_t, "vocab": len(tokenizer),
        "width": args.width, "layers": args.layers, "heads": args.heads, "rope_theta": theta,
        "arch_note": f"; rotary on {args.rotary_pct:.0%} of each head's dimensions (Pythia: 25%), RoPE base "
        f"{theta:.1f} (slowest frequency turns π over L_t; Pythia: 10000 at L_t = 2048)" if family == "pythia" else "",
        "params_m": sum(p.numel() for p in exported.parameters()) / 1e6,
        "steps": loop.step, "tokens": loop.step * recipe.plan.tokens_per_step, "batch_size": args.batch_size,
        "lr": args.lr, "seed": args.seed, "train_seconds": loop.state["seconds"], "threads": torch.get_num_threads(),
        "device": "CPU" if not torch.cuda.is_available() else torch.cuda.get_device_name(),
        "final_loss": loop.state.get("last_loss"), "eval_sequences": len(seqs),
        "ppl": ppl, "ppl_tokens": ppl_tokens, "unigram_ppl": unigram[0], "unigram_ppl_tokens": unigram[1],
        **args.corpus, "command": "python scripts/train_mini_decoders.py " + " ".join(args.argv),
    }
    (tmp / "lengthx_mini.json").write_text(json.dumps(meta, indent=1))
    (tmp / "README.md").write_text(card(name, meta))
    (tmp / "curve.json").write_text(json.dumps(loop.state["curve"]))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"{name}: held-out ppl@L_t {ppl:.2f} (unigram {unigram[0]:.2f}); {out}", flush=True)
    return meta


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``scripts/train_mini_decoders.py``'s options parsed from ``argv``."""
    args = parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    return args


def parser() -> argparse.ArgumentParser:
    """The decoder minis' options (``lengthx train-mini`` reads their names and kinds from here)."""
    p = argparse.ArgumentParser(prog="scripts/train_mini_decoders.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
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
    p.add_argument("--log-every", type=int, default=25, help="a curve row (the step's loss) every N steps")
    p.add_argument("--work", default=str(REPO / "runs" / "mini-pretrain"))
    p.add_argument("--out", default=str(REPO / "lengthx" / "checkpoints"))
    p.add_argument("--summary", default=str(REPO / "results" / "mini" / "minis.md"))
    p.add_argument("--quiet", action="store_true", help="kept for the cards' commands (the loop logs no bar)")
    p.add_argument("--stop-step", type=int, default=None,
                   help="stop each mini after this step without changing its schedule (a rerun without it resumes)")
    return p


def main(argv: list[str] | None = None) -> None:
    """Train (or resume) and export the decoder minis ``--families``, then rewrite the summary."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    tok_dir = Path(args.work) / "tokenizer"
    train_docs = stdlib_documents("train", TEST_PERCENT)
    test_docs = stdlib_documents("test", TEST_PERCENT)
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
    done = {m["name"]: m for m in metas if m is not None}
    for name, *_rest in MINIS.values():  # keep the other minis' lines in the summary
        meta_file = Path(args.out) / name / "lengthx_mini.json"
        if name not in done and meta_file.is_file():
            done[name] = json.loads(meta_file.read_text())
    write_summary([done[n] for n, *_ in MINIS.values() if n in done], Path(args.summary))
