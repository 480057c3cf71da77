#!/usr/bin/env python
"""Train mini-t5: a small T5 (learned relative position buckets) that retrieves by key at its training length.

Paper A's largest effects are on retrieval (§5.2, Table 4): LongEval lines and topics, passkey. Its phenomenon
only shows on a T5 that solves them at L_tr, so this script trains one from scratch, offline:

* **Data.** Examples are built as token-id tensors on the training device (``lengthx.tasks.token_ids``):
  the exact prompts of ``lengthx.tasks.passkey`` / ``lines`` / ``topics`` for draws made with tensor
  operations, no text and no tokenizer in the loop. Each batch mixes the tasks in fixed shares.
* **Curriculum with gates.** Lines records start with 1 line (the model learns to copy a number) and get
  one more line only when the teacher-forced exact match of the examples with the current number of lines
  reaches ``--gate`` over the last ``--gate-window`` of them; half of each lines share has exactly the
  current count, the other half 1..count. After the last count that fits L_tr comes the full stage: as many
  lines as fit. The 2-line stage is the go/no-go gate: passing it means the model matches the asked index
  against the record's indices (50% is what copying a random line of two gives). If the gate has not passed
  after ``--gate-minutes`` of training, training stops (NO-GO) and the curve says so.
* **Curve.** Every ``--log-every`` steps ``curve.json`` gets the loss and teacher-forced EM per task, the EM
  per number of lines, the stage and the throughput; every ``--eval-every`` steps, greedy-decoding EM on
  held-out examples built by the harness's own task classes at L_tr (the model card's protocol).
* **Resumable.** ``--out`` holds ``state.pt`` (model, optimizer, curriculum, generator state, curve); rerun
  the same command to continue. Training is time-boxed (``--max-minutes``, cumulative over resumes) and
  step-boxed; the learning rate warms up, stays flat and decays linearly over the last ``--decay-frac``.
* **Snapshots.** ``--export-steps 300,600,…`` exports an fp16 snapshot with its card (held-out EM at L_tr of
  the trained tasks, from the exported weights) to ``OUT/snapshots/step-NNNNN`` at those step counts, on one
  learning-rate schedule (step counts, not wall minutes, so a snapshot is the same on a busy CPU). With
  ``--w-lines 0`` there is no lines curriculum and no gate; the card's bar names the trained tasks only.
* **Export.** ``--export DIR`` writes fp16 safetensors, the tokenizer, the model card (README.md) and
  ``curve.json`` (the final held-out EM at each ``--final-lengths``, measured on the exported weights).

On a GPU (bf16 autocast, TF32, optional ``--compile``):

    python scripts/train_mini_t5.py --out runs/mini-t5 --max-minutes 20 --batch-size 512 \\
        --export lengthx/checkpoints/mini-t5

A CPU smoke run: ``--device cpu --d-model 64 --enc-layers 2 --dec-layers 1 --max-steps 20 --batch-size 8``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from transformers import AutoTokenizer, PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration  # noqa: E402

from lengthx.tasks.base import Setting  # noqa: E402
from lengthx.tasks.lines import LinesTask  # noqa: E402
from lengthx.tasks.passkey import PasskeyTask  # noqa: E402
from lengthx.tasks.token_ids import IGNORE, IdBatch, LinesIds, PasskeyIds, TopicsIds  # noqa: E402
from lengthx.tasks.topics import TopicsTask, generate_conversations  # noqa: E402

TASKS = ("passkey", "lines", "topics")
EVAL_TASKS = {"passkey": PasskeyTask, "lines": LinesTask, "topics": TopicsTask}
MAX_NEW = {"passkey": 8, "lines": 8, "topics": 24}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------ data
class Mixture:
    """One training batch: fixed shares of passkey, lines (at the curriculum's line counts) and topics."""

    def __init__(self, tok: PreTrainedTokenizerFast, args: argparse.Namespace, device: torch.device):
        self.gens = {"passkey": PasskeyIds(tok, args.l_tr, device), "lines": LinesIds(tok, args.l_tr, device),
                     "topics": TopicsIds(tok, args.l_tr, device)}
        shares = {"passkey": args.w_passkey, "lines": args.w_lines, "topics": args.w_topics}
        total = sum(shares.values())
        self.sizes = {t: round(args.batch_size * w / total) for t, w in shares.items() if w > 0}
        self.label_width = max(int((g.answers != IGNORE).sum(1).max()) for g in self.gens.values())
        self.ramp_steps = args.ramp_steps
        self.device = device
        self.counts = args.topics_records == "counts"  # topics records of 1..k_max conversations, built as text
        if self.counts:
            self.tok, self.l_tr, self.k_max, self.seed = tok, args.l_tr, args.topics_k_max, args.seed
            self.topics = TopicsTask(prompt_format=args.topics_format)
            self.label_width = max(self.label_width, max(len(tok(c.topic)["input_ids"]) for c in generate_conversations()))

    def topics_by_count(self, step: int, size: int) -> IdBatch:
        """``size`` records of :meth:`lengthx.tasks.topics.TopicsTask.training_record` (text, then ids), drawn from a
        generator seeded by (seed, step): a resumed run draws the same records. A draw whose opening sentences do
        not fit L_tr (six long ones can exceed it) is drawn again."""
        rng = random.Random(f"topics-counts:{self.seed}:{step}")
        prompts, answers = [], []
        while len(prompts) < size:
            try:
                prompt, topic, _ = self.topics.training_record(self.tok, self.l_tr, self.k_max, rng)
            except ValueError:
                continue
            prompts.append(prompt)
            answers.append(topic)
        enc = self.tok(prompts, padding="max_length", max_length=self.l_tr, return_tensors="pt")
        labels = torch.full((size, self.label_width), IGNORE, dtype=torch.long)
        for i, ids in enumerate(self.tok(answers)["input_ids"]):
            labels[i, : len(ids)] = torch.tensor(ids)
        return IdBatch(enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device), labels.to(self.device))

    def batch(self, step: int, lines_count: int, gen: torch.Generator) -> tuple[IdBatch, torch.Tensor, torch.Tensor]:
        """(batch, task index per example, lines kept per example (0 for other tasks))."""
        ramp = 1.0 if self.ramp_steps <= 0 else min(1.0, (step + 1) / self.ramp_steps)
        parts, task, n_lines = [], [], []
        for t, size in self.sizes.items():
            if t == "lines":
                exact = torch.rand(size, generator=gen, device=self.device) < 0.5
                below = torch.randint(1, lines_count + 1, (size,), generator=gen, device=self.device)
                b = self.gens[t].sample(size, torch.where(exact, lines_count, below), gen)
                n_lines.append(b.draw["n_lines"])
            elif t == "topics" and self.counts:
                b = self.topics_by_count(step, size)
                n_lines.append(torch.zeros(size, dtype=torch.long, device=self.device))
            else:
                b = self.gens[t].sample(size, ramp, gen)
                n_lines.append(torch.zeros(size, dtype=torch.long, device=self.device))
            parts.append(b)
            task.append(torch.full((size,), TASKS.index(t), dtype=torch.long, device=self.device))
        labels = torch.full((sum(self.sizes.values()), self.label_width), IGNORE, dtype=torch.long, device=self.device)
        row = 0
        for b in parts:
            labels[row : row + len(b.labels), : b.labels.shape[1]] = b.labels[:, : self.label_width]
            row += len(b.labels)
        batch = IdBatch(torch.cat([b.input_ids for b in parts]), torch.cat([b.attention_mask for b in parts]), labels)
        return batch, torch.cat(task), torch.cat(n_lines)


class Curriculum:
    """Lines stages 1, 2, …, ``capacity`` and then full (as many as fit); a stage passes when the examples
    with exactly that many lines reach ``gate`` exact match over a block of at least ``window`` of them."""

    def __init__(self, capacity: int, gate: float, window: int, device: torch.device):
        self.capacity, self.gate, self.window = capacity, gate, window
        self.stage = 1
        self.hits = torch.zeros((), device=device)  # running on the device: no synchronisation per step
        self.seen = torch.zeros((), device=device)
        self.passed: dict[int, int] = {}  # stage -> step it passed

    @property
    def full(self) -> bool:
        return self.stage > self.capacity

    @property
    def lines_count(self) -> int:
        """Lines requested per record at this stage (the full stage asks for more than fit)."""
        return 2 * self.capacity + 2 if self.full else self.stage

    def update(self, n_lines: torch.Tensor, exact: torch.Tensor) -> None:
        """Count a batch's lines examples at the current stage."""
        at_stage = n_lines == self.stage
        self.hits += (exact & at_stage).sum()
        self.seen += at_stage.sum()

    def advance(self, step: int) -> bool:
        """Close the block once it has ``window`` examples; pass the stage (and return True) at ``gate``."""
        seen = float(self.seen)
        if self.full or seen < self.window:
            return False
        rate = float(self.hits) / seen
        self.hits.zero_()
        self.seen.zero_()
        if rate >= self.gate:
            self.passed[self.stage] = step
            self.stage += 1
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "hits": float(self.hits), "seen": float(self.seen), "passed": self.passed}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.stage, self.passed = d["stage"], {int(k): v for k, v in d["passed"].items()}
        self.hits.fill_(d["hits"])
        self.seen.fill_(d["seen"])


# ----------------------------------------------------------------------------------------------- model
def build_model(args: argparse.Namespace, tok: PreTrainedTokenizerFast) -> T5ForConditionalGeneration:
    config = T5Config(
        vocab_size=len(tok), d_model=args.d_model, d_kv=args.d_kv, d_ff=args.d_ff, num_layers=args.enc_layers,
        num_decoder_layers=args.dec_layers, num_heads=args.heads, relative_attention_num_buckets=32,
        relative_attention_max_distance=args.max_distance, dropout_rate=0.0, feed_forward_proj=args.ff_proj,
        tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    model = T5ForConditionalGeneration(config)
    model.generation_config.decoder_start_token_id = tok.pad_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def teacher_forced(model: torch.nn.Module, batch: IdBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example mean token cross-entropy, and whether every answer token is the argmax (exactly when greedy
    decoding would produce the answer)."""
    labels = batch.labels
    dec_in = labels.new_zeros(labels.shape)  # decoder start = pad = 0
    dec_in[:, 1:] = labels[:, :-1].clamp(min=0)
    on = torch.device(batch.input_ids.device).type
    with torch.autocast(on, dtype=torch.bfloat16, enabled=on == "cuda"):
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=dec_in).logits
    mask = labels != IGNORE
    tok_loss = F.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=IGNORE, reduction="none")
    loss = (tok_loss * mask).sum(1) / mask.sum(1).clamp(min=1)
    exact = ((logits.argmax(-1) == labels) | ~mask).all(1)
    return loss, exact


def lr_at(step: int, progress: float, args: argparse.Namespace) -> float:
    """Warm-up, flat, then linear decay to zero over the last ``decay_frac`` of the run's progress."""
    warm = min(1.0, (step + 1) / max(1, args.warmup))
    tail = 1.0 if progress < 1 - args.decay_frac else max(0.0, (1 - progress) / args.decay_frac)
    return args.lr * warm * tail


# ------------------------------------------------------------------------------------------- held out
def held_out(tok: PreTrainedTokenizerFast, length: int, n: int, seed: int,
             names: tuple[str, ...] = TASKS, topics_format: str = "longeval",
             counts: tuple[int, ...] = ()) -> dict[str, tuple[Any, list]]:
    """The harness's own examples (task classes, token-fitted with this tokenizer) at ``length`` tokens; topics in
    ``topics_format``, and ``topics-k<K>`` sets of exactly K conversations for each of ``counts``."""
    setting = Setting(str(length), length, "tokens")
    tasks = {name: EVAL_TASKS[name]() for name in names if name != "topics"}
    if "topics" in names:
        tasks["topics"] = TopicsTask(prompt_format=topics_format)
        tasks.update({f"topics-k{k}": TopicsTask(prompt_format=topics_format, num_topics=k) for k in counts})
    return {name: (task, task.examples(setting, tok, n, seed)) for name, task in tasks.items()}


@torch.no_grad()
def exact_match(model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast, sets: dict[str, tuple[Any, list]],
                batch_size: int = 64) -> dict[str, float]:
    """Greedy decoding, scored by each task's own rule (accuracy, %)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: dict[str, float] = {}
    for name, (task, examples) in sets.items():
        scores = []
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            enc = tok([e.prompt for e in chunk], return_tensors="pt", padding=True).to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                ids = model.generate(**enc, max_new_tokens=MAX_NEW[name.split("-")[0]], do_sample=False,
                                     num_beams=1)
            for text, e in zip(tok.batch_decode(ids, skip_special_tokens=True), chunk, strict=True):
                scores.append(task.score(text, e)["accuracy"])
        out[name] = sum(scores) / len(scores)
    model.train(was_training)
    return out


# ---------------------------------------------------------------------------------------------- export
def export(model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast, path: Path) -> None:
    """fp16 safetensors (shards of at most 12 MB) + config + tokenizer in ``path`` (``from_pretrained`` loads it)."""
    path.mkdir(parents=True, exist_ok=True)
    half = T5ForConditionalGeneration(model.config)
    half.load_state_dict({k: v.detach().float().cpu() for k, v in model.state_dict().items()})
    half.generation_config = model.generation_config
    half.half().save_pretrained(str(path), max_shard_size="12MB")  # shards small enough for any file limit
    tok.save_pretrained(str(path))


TASK_TITLES = {"passkey": "passkey", "lines": "LongEval lines", "topics": "LongEval topics"}
RETRIEVAL_BAR = {"passkey": 95.0, "topics": 90.0, "lines": 70.0}  # held-out EM % at L_tr of a model "good at L_tr"


def trained_tasks(args: argparse.Namespace) -> tuple[str, ...]:
    """The tasks with a positive share of the batch."""
    return tuple(t for t in TASKS if getattr(args, f"w_{t}") > 0)


def model_card(args: argparse.Namespace, model: T5ForConditionalGeneration, summary: dict[str, Any]) -> str:
    """The checkpoint's README: status first (the bar of each trained task at L_tr, :data:`RETRIEVAL_BAR`), then how."""
    c, final, l_tr = model.config, summary["final"], args.l_tr
    bar = ", ".join(f"{t} >= {RETRIEVAL_BAR[t]:.0f}%" for t in trained_tasks(args))
    met = all(final.get(f"{t}@{l_tr}", 0) >= RETRIEVAL_BAR[t] for t in trained_tasks(args))
    counts = card_counts(args)
    if counts and "topics" in trained_tasks(args):  # the bar holds at every count of conversations
        bar += f" at every count {counts[0]}-{counts[-1]}"
        met = met and all(final.get(f"topics-k{k}@{l_tr}", 0) >= RETRIEVAL_BAR["topics"] for k in counts)
    status = f"meets the retrieval bar at L_tr ({bar})" if met else f"does NOT meet the retrieval bar at L_tr ({bar})"
    rows = "\n".join(f"| {k} | {v:.0f} |" for k, v in final.items())
    gates = ", ".join(f"{k} lines at step {v}" for k, v in sorted(summary["gates"].items())) or "none"
    n_params = sum(p.numel() for p in model.parameters())
    note = f"\n{args.card_note.strip()}\n" if args.card_note else ""
    return f"""# mini-t5 — {status}
{note}
The `mini` profile's stand-in for Flan-T5 (`conf/model/mini-t5.yaml`): a small T5 with learned relative
position buckets, trained from scratch by `scripts/train_mini_t5.py` on {" and ".join(TASK_TITLES[t] for t in trained_tasks(args))}
prompts{topics_built(args)}. L_tr = {l_tr} tokens; relative_attention_max_distance
= {c.relative_attention_max_distance} (<= L_tr/2), so longer inputs add no new bucket and only the attention's
dispersal changes.

## Held-out exact match (%, greedy), exported fp16 weights loaded in fp32
{args.final_n} examples per cell from the harness's task classes (seeds {args.final_seed}+), fitted to the
token length with this tokenizer; 95% intervals for n = {args.final_n} are about ±{196 * (0.25 / args.final_n) ** 0.5:.0f} points at 50%.
{topics_note(args)}
| set | EM % |
|---|---|
{rows}

## Training
- {n_params / 1e6:.2f}M parameters: d_model {c.d_model}, {c.num_heads} heads x d_kv {c.d_kv}, d_ff {c.d_ff}
  ({c.feed_forward_proj}), {c.num_layers} encoder / {c.num_decoder_layers} decoder layers, tied embeddings.
- Batch {args.batch_size}: shares passkey {args.w_passkey}, lines {args.w_lines}, topics {args.w_topics}{topics_recipe(args)}; AdamW
  lr {args.lr}, warm-up {args.warmup}, linear decay over the last {args.decay_frac:.0%}.
- Lines curriculum gates (teacher-forced EM >= {args.gate} over {args.gate_window} examples): {gates};
  final stage: {summary['stage']}{'' if args.w_lines > 0 else ' (lines not trained: no gate)'}.
- {summary['steps']} steps, {summary['train_minutes']:.1f} minutes on {summary['hardware']}
  ({summary['examples_per_s']:.0f} training examples/s).
- `curve.json`: the curve (loss and EM per task, EM per line count, held-out EM) and this command:

```
{summary['command']}
```
"""


def card_counts(args: argparse.Namespace) -> tuple[int, ...]:
    """The conversation counts the card measures at L_tr (``--card-counts``)."""
    return tuple(int(x) for x in args.card_counts.split(",") if x.strip())


def topics_note(args: argparse.Namespace) -> str:
    """The card's note on its topics sets (format, counts)."""
    if "topics" not in trained_tasks(args):
        return ""
    note = f"Topics prompts in the `{args.topics_format}` format (lengthx.tasks.topics.FORMATS)"
    if card_counts(args):
        note += ("; `topics-k<K>` holds exactly K conversations per record (task.num_topics=K), `topics` the "
                 "benchmark's records (as many conversations as the length holds)")
    return note + ".\n"


def topics_built(args: argparse.Namespace) -> str:
    """How the card says the prompts were built."""
    if args.topics_records == "counts":
        return f" (topics as text records of 1-{args.topics_k_max} conversations, lengthx.tasks.topics_records)"
    return " built as token ids (`lengthx.tasks.token_ids`)"


def topics_recipe(args: argparse.Namespace) -> str:
    """How the topics share was built, for the card."""
    if args.topics_records != "counts":
        return " (topics as token ids, lengthx.tasks.token_ids)"
    return (f" (topics records of 1-{args.topics_k_max} conversations in the `{args.topics_format}` format, "
            "lengthx.tasks.topics.TopicsTask.training_record)")


# ------------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="run directory (state.pt, curve.json, export/)")
    p.add_argument("--tokenizer", type=Path, default=ROOT / "lengthx/checkpoints/mini-t5")
    p.add_argument("--export", type=Path, default=None, help="also export the final model (+ card) here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--l-tr", type=int, default=256)
    p.add_argument("--max-distance", type=int, default=128)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--d-kv", type=int, default=32)
    p.add_argument("--d-ff", type=int, default=768)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--enc-layers", type=int, default=6)
    p.add_argument("--dec-layers", type=int, default=4)
    p.add_argument("--ff-proj", default="gated-gelu")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--decay-frac", type=float, default=0.15)
    p.add_argument("--max-steps", type=int, default=1_000_000)
    p.add_argument("--max-minutes", type=float, default=20.0, help="cumulative training time box (0: none)")
    p.add_argument("--w-passkey", type=float, default=0.2)
    p.add_argument("--w-lines", type=float, default=0.65)
    p.add_argument("--w-topics", type=float, default=0.15)
    p.add_argument("--ramp-steps", type=int, default=1000, help="passkey filler and topics length ramp")
    p.add_argument("--gate", type=float, default=0.9, help="teacher-forced EM that passes a lines stage")
    p.add_argument("--gate-window", type=int, default=2000, help="examples the gate averages over")
    p.add_argument("--gate-minutes", type=float, default=12.0,
                   help="stop (NO-GO) if the 2-line gate has not passed after this much training (0: never)")
    p.add_argument("--log-every", type=int, default=200)
    p.add_argument("--eval-every", type=int, default=2000)
    p.add_argument("--eval-n", type=int, default=64)
    p.add_argument("--eval-seed", type=int, default=10_000)
    p.add_argument("--final-n", type=int, default=100)
    p.add_argument("--final-seed", type=int, default=500_000)
    p.add_argument("--final-lengths", default="256,512,1024", help="token lengths of the final evaluation")
    p.add_argument("--save-every-minutes", type=float, default=3.0)
    p.add_argument("--stop-step", type=int, default=None,
                   help="stop after this step without changing the schedule (which --max-steps sets): "
                        "retrains one snapshot of a longer run exactly")
    p.add_argument("--snapshots-to", type=Path, default=None, help="where --export-steps snapshots go "
                   "(default OUT/snapshots)")
    p.add_argument("--card-note", default="", help="markdown placed under the card's title (e.g. how this "
                   "snapshot was selected)")
    p.add_argument("--export-steps", default="",
                   help="comma-separated step counts at which an fp16 snapshot (weights, tokenizer, card with "
                        "held-out EM at L_tr) is exported to OUT/snapshots/step-NNNNN (or --snapshots-to); resumable")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (GPU)")
    p.add_argument("--topics-records", choices=("ids", "counts"), default="ids",
                   help="ids: the benchmark's records as token ids (1-2 conversations at L_tr 256); counts: records "
                        "of 1..--topics-k-max conversations built as text (lengthx.tasks.topics_records)")
    p.add_argument("--topics-k-max", type=int, default=6, help="most conversations per counts record")
    p.add_argument("--topics-format", choices=("longeval", "short"), default="longeval",
                   help="the topics prompt's header and question (lengthx.tasks.topics.FORMATS), in training "
                        "(counts records) and in the card's held-out sets")
    p.add_argument("--card-counts", default="", help="comma-separated conversation counts K: the card and the "
                   "held-out evaluations also measure topics records of exactly K conversations at L_tr")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python scripts/train_mini_t5.py " + " ".join(sys.argv[1:] if argv is None else argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"
    args.out.mkdir(parents=True, exist_ok=True)
    if not (args.tokenizer / "tokenizer.json").exists():
        raise SystemExit(f"--tokenizer {args.tokenizer} has no tokenizer.json; pass the directory of a tokenizer "
                         "trained by lengthx.data.tokenizers.train_tokenizer (e.g. lengthx/checkpoints/mini-t5)")
    tok = AutoTokenizer.from_pretrained(str(args.tokenizer), trust_remote_code=False)

    t0 = time.time()
    mix = Mixture(tok, args, device)
    curriculum = Curriculum(mix.gens["lines"].capacity(), args.gate, args.gate_window, device)
    log(f"token-id tables built in {time.time() - t0:.1f}s; lines capacity {curriculum.capacity} at L_tr "
        f"{args.l_tr}; passkey filler up to {mix.gens['passkey'].max_garbage} chars; shares {mix.sizes}")
    model = build_model(args, tok).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01,
                            fused=device.type == "cuda")
    gen = torch.Generator(device=device).manual_seed(args.seed)
    state: dict[str, Any] = {"step": 0, "train_seconds": 0.0, "examples": 0, "curve": [], "stopped": None}
    ckpt = args.out / "state.pt"
    if ckpt.exists():
        saved = torch.load(ckpt, map_location="cpu", weights_only=True)  # tensors and plain types only: no pickle code
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        curriculum.load_state_dict(saved["curriculum"])
        gen.set_state(saved["generator"])
        state = saved["state"]
        log(f"resumed from {ckpt} at step {state['step']} ({state['train_seconds'] / 60:.1f} min), stage "
            f"{curriculum.stage}")
    log(f"device {hardware}; {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    eval_sets = held_out(tok, args.l_tr, args.eval_n, args.eval_seed, trained_tasks(args), args.topics_format,
                         card_counts(args))
    fwd = torch.compile(model) if args.compile else model
    export_steps = {int(x) for x in args.export_steps.split(",") if x.strip()}

    def save() -> None:
        tmp = args.out / "state.pt.tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "curriculum": curriculum.state_dict(),
                    "generator": gen.get_state(), "state": state}, tmp)
        os.replace(tmp, ckpt)
        (args.out / "curve.json").write_text(json.dumps(state["curve"], indent=1))

    def progress() -> float:
        p = state["step"] / args.max_steps
        return max(p, state["train_seconds"] / (60 * args.max_minutes)) if args.max_minutes > 0 else p

    model.train()
    window = {"loss": torch.zeros(3, device=device), "exact": torch.zeros(3, device=device),
              "n": torch.zeros(3, device=device), "lines_exact": torch.zeros(64, device=device),
              "lines_n": torch.zeros(64, device=device), "t": time.time(), "examples": 0}
    last_save = tick = time.time()
    while progress() < 1 and state["stopped"] is None and (args.stop_step is None or state["step"] < args.stop_step):
        batch, task, n_lines = mix.batch(state["step"], curriculum.lines_count, gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(state["step"], progress(), args)
        loss, exact = teacher_forced(fwd, batch)
        opt.zero_grad(set_to_none=True)
        loss.mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["examples"] += len(task)
        window["examples"] += len(task)
        with torch.no_grad():
            for key, value in (("loss", loss.detach()), ("exact", exact.float()), ("n", torch.ones_like(loss))):
                window[key].index_add_(0, task, value)
            lines_rows = task == TASKS.index("lines")
            n_lines = n_lines.clamp(max=63)
            window["lines_exact"].index_add_(0, n_lines[lines_rows], exact[lines_rows].float())
            window["lines_n"].index_add_(0, n_lines[lines_rows], torch.ones_like(loss[lines_rows]))
        curriculum.update(n_lines[lines_rows], exact[lines_rows])
        if state["step"] % 25 == 0 and curriculum.advance(state["step"]):
            log(f"gate passed at step {state['step']}: now {'full records' if curriculum.full else curriculum.stage} lines")
        now = time.time()
        state["train_seconds"] += now - tick
        tick = now
        minutes = state["train_seconds"] / 60
        if "lines" in mix.sizes and args.gate_minutes > 0 and minutes > args.gate_minutes and curriculum.stage <= 2:
            state["stopped"] = f"NO-GO: the {curriculum.stage}-line gate did not pass in {args.gate_minutes} minutes"
            log(state["stopped"])
        if state["step"] % args.log_every == 0 or state["stopped"]:
            if device.type == "cuda":
                torch.cuda.synchronize()
            n = window["n"].clamp(min=1)
            row: dict[str, Any] = {
                "step": state["step"], "minutes": round(minutes, 3), "stage": curriculum.stage,
                "examples_per_s": round(window["examples"] / max(time.time() - window["t"], 1e-9), 1),
                **{f"loss_{t}": round(v, 4) for t, v in zip(TASKS, (window["loss"] / n).tolist(), strict=True)},
                **{f"em_{t}": round(v, 4) for t, v in zip(TASKS, (window["exact"] / n).tolist(), strict=True)},
                "em_by_lines": {k: round(e / c, 3) for k, (e, c) in
                                enumerate(zip(window["lines_exact"].tolist(), window["lines_n"].tolist(), strict=True))
                                if c > 0},
            }
            if state["step"] % args.eval_every == 0:
                row["held_out"] = exact_match(model, tok, eval_sets)
                tick = time.time()  # evaluation time is not training time
            state["curve"].append(row)
            log(" ".join(f"{k} {v}" for k, v in row.items()))
            for key in ("loss", "exact", "n", "lines_exact", "lines_n"):
                window[key].zero_()
            window["t"], window["examples"] = time.time(), 0
        if state["step"] in export_steps and not (snapshot_dir(args, state["step"]) / "README.md").exists():
            save()
            export(model, tok, snapshot_dir(args, state["step"]))
            finish(args, tok, state, curriculum, hardware, command, device, snapshot_dir(args, state["step"]),
                   [args.l_tr], also=[])
            last_save = tick = time.time()  # saving and evaluating are not training time
        if time.time() - last_save > 60 * args.save_every_minutes:
            save()
            last_save = tick = time.time()
    save()
    export(model, tok, args.out / "export")
    log(f"stopped at step {state['step']}, {state['train_seconds'] / 60:.1f} min: {state['stopped'] or 'time or step box'}")
    lengths = [int(x) for x in args.final_lengths.split(",") if x]
    finish(args, tok, state, curriculum, hardware, command, device, args.out / "export", lengths,
           also=[args.export] if args.export is not None else [])
    return 0


def snapshot_dir(args: argparse.Namespace, step: int) -> Path:
    """Where the snapshot exported at ``step`` lives (``--export-steps``)."""
    return (args.snapshots_to or args.out / "snapshots") / f"step-{step:05d}"


def finish(args: argparse.Namespace, tok: PreTrainedTokenizerFast, state: dict[str, Any], curriculum: Curriculum,
           hardware: str, command: str, device: torch.device, exported: Path, lengths: list[int],
           also: list[Path]) -> None:
    """Held-out EM of the exported fp16 weights in ``exported`` at each of ``lengths`` (the trained tasks);
    model card and curve beside them, and copies in ``also``."""
    model = T5ForConditionalGeneration.from_pretrained(str(exported), dtype=torch.float32,
                                                      trust_remote_code=False).to(device).eval()
    final: dict[str, float] = {}
    for length in lengths:
        sets = held_out(tok, length, args.final_n, args.final_seed, trained_tasks(args), args.topics_format,
                        card_counts(args) if length == args.l_tr else ())
        for name, value in exact_match(model, tok, sets).items():
            final[f"{name}@{length}"] = value
        log("final @ " + str(length) + ": " + ", ".join(f"{k} {v:.0f}%" for k, v in final.items() if k.endswith(f"@{length}")))
    seconds = max(state["train_seconds"], 1e-9)
    summary = {"l_tr": args.l_tr, "steps": state["step"], "train_minutes": seconds / 60, "hardware": hardware,
               "examples_per_s": state["examples"] / seconds, "command": command, "stage": curriculum.stage,
               "gates": curriculum.passed, "stopped": state["stopped"], "final": final, "curve": state["curve"]}
    card = model_card(args, model, summary)
    for target in [exported, *also]:
        if target != exported:
            export(model, tok, target)
        (target / "curve.json").write_text(json.dumps(summary, indent=1))
        (target / "README.md").write_text(card)  # last: a snapshot with a card is complete
        log(f"exported to {target}")


if __name__ == "__main__":
    sys.exit(main())
