"""The retrieval stand-in's model card (README.md of a snapshot or export; docs/mini-t5-study.md): its status
against the retrieval bar at L_tr first, then the held-out table and how it was trained."""

from __future__ import annotations

import argparse
from typing import Any

from transformers import T5ForConditionalGeneration

from lengthx.minis.retrieval_data import TASKS

TASK_TITLES = {"passkey": "passkey", "lines": "LongEval lines", "topics": "LongEval topics"}
RETRIEVAL_BAR = {"passkey": 95.0, "topics": 90.0, "lines": 70.0}  # held-out EM % at L_tr of a model "good at L_tr"
LOOKUP_GATE = 90.0  # the lookup stand-in's gate: held-out lines EM % at L_tr at every count (docs/mini-t5-lookup.md)


def trained_tasks(args: argparse.Namespace) -> tuple[str, ...]:
    """The tasks with a positive share of the batch."""
    return tuple(t for t in TASKS if getattr(args, f"w_{t}") > 0)


def retrieval_bar(args: argparse.Namespace, final: dict[str, float]) -> tuple[str, bool]:
    """The bar at L_tr that the card states (each trained task's :data:`RETRIEVAL_BAR`, topics at every card count,
    lines at :data:`LOOKUP_GATE` at every card count), and whether the held-out ``final`` meets it."""
    l_tr = args.l_tr
    bar = ", ".join(f"{t} >= {RETRIEVAL_BAR[t]:.0f}%" for t in trained_tasks(args))
    met = all(final.get(f"{t}@{l_tr}", 0) >= RETRIEVAL_BAR[t] for t in trained_tasks(args))
    counts = card_counts(args)
    if counts and "topics" in trained_tasks(args):  # the bar holds at every count of conversations
        bar += f" at every count {counts[0]}-{counts[-1]}"
        met = met and all(final.get(f"topics-k{k}@{l_tr}", 0) >= RETRIEVAL_BAR["topics"] for k in counts)
    lines_counts = card_lines(args)
    if lines_counts and "lines" in trained_tasks(args):  # the lookup gate: the L_tr records and every count
        bar += f", lines >= {LOOKUP_GATE:.0f}% on the L_tr records and at every count {lines_counts[0]}-{lines_counts[-1]}"
        met = met and all(final.get(f"{name}@{l_tr}", 0) >= LOOKUP_GATE
                          for name in ["lines", *(f"lines-n{n}" for n in lines_counts)])
    filled = card_fill_lines(args)
    if filled and "lines" in trained_tasks(args):  # the lines study's records: exactly K lines in filler to L_tr
        bar += f", and on K lines padded with filler to L_tr at K = {', '.join(map(str, filled))}"
        met = met and all(final.get(f"lines-fill-n{k}@{l_tr}", 0) >= LOOKUP_GATE for k in filled)
    return bar, met


def model_card(args: argparse.Namespace, model: T5ForConditionalGeneration, summary: dict[str, Any]) -> str:
    """The checkpoint's README: status first (the bar of each trained task at L_tr, :data:`RETRIEVAL_BAR`), then how."""
    c, final, l_tr = model.config, summary["final"], args.l_tr
    bar, met = retrieval_bar(args, final)
    status = f"meets the retrieval bar at L_tr ({bar})" if met else f"does NOT meet the retrieval bar at L_tr ({bar})"
    rows = "\n".join(f"| {k} | {v:.0f} |" for k, v in final.items())
    gates = ", ".join(f"{k} lines at step {v}" for k, v in sorted(summary["gates"].items(), key=lambda kv: kv[1]))
    gates = gates or "none"
    n_params = sum(p.numel() for p in model.parameters())
    note = f"\n{args.card_note.strip()}\n" if args.card_note else ""
    return f"""# mini-t5 — {status}
{note}
The `mini` profile's stand-in for Flan-T5 (`conf/model/mini-t5.yaml`): a small T5 with learned relative
position buckets, trained {"from " + str(args.init_from) if getattr(args, "init_from", None) else "from scratch"} by `scripts/train_mini_t5.py` on {" and ".join(TASK_TITLES[t] for t in trained_tasks(args))}
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
- {lookup_recipe(args)}Lines curriculum gates (teacher-forced EM >= {args.gate} over {args.gate_window} examples): {gates};
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


def card_lines(args: argparse.Namespace) -> tuple[int, ...]:
    """The line counts the card measures at L_tr (``--card-lines``)."""
    return tuple(int(x) for x in getattr(args, "card_lines", "").split(",") if x.strip())


def card_fill_lines(args: argparse.Namespace) -> tuple[int, ...]:
    """The line counts the card measures padded with filler to L_tr (``--card-fill-lines``)."""
    return tuple(int(x) for x in getattr(args, "card_fill_lines", "").split(",") if x.strip())


def lookup_recipe(args: argparse.Namespace) -> str:
    """How the lines share was built and where the weights started, for the card (empty for the token-id lines)."""
    out = f"Started from the weights of `{args.init_from}`. " if getattr(args, "init_from", None) else ""
    if getattr(args, "lines_records", "ids") == "lookup":
        out += (f"Lines records built as text in the `{args.lines_format}` format, the asked key echoed in the "
                f"target, {args.lines_multi:.0%} of them multi-query (lengthx.minis.lookup_data); `lines-n<N>` "
                "holds exactly N lines.")
        if getattr(args, "lines_fill", 0.0):
            out += (f" {args.lines_fill:.0%} of the records padded with the passkey task's filler to a drawn length "
                    "up to L_tr (lengthx.minis.lookup_data.padded); `lines-fill-n<K>` holds exactly K lines padded "
                    "with filler to L_tr, the records of `task.num_lines=K`.")
        forms = getattr(args, "lookup_forms", "benchmark")
        if forms != "benchmark":
            out += (f" The curriculum trained the record forms {forms.replace(',', ', then ')} in turn, each to its "
                    "full stage (lengthx.minis.curriculum); the held-out sets are the benchmark's.")
        out += "\n- "
    return out


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
