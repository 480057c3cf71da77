"""The retrieval stand-in's options (``scripts/train_mini_t5.py --help``; the recipe is
:mod:`lengthx.minis.retrieval`, docs/mini-t5-study.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lengthx.minis.lookup_data import FORMS

TOKENIZER = Path(__file__).resolve().parents[1] / "checkpoints" / "mini-t5"
DESCRIPTION = """Train mini-t5: a small T5 (learned relative position buckets) that retrieves by key at its training
length (lengthx.minis.retrieval).

On a GPU (bf16 autocast, TF32, optional --compile):

    python scripts/train_mini_t5.py --out runs/mini-t5 --max-minutes 20 --batch-size 512 \\
        --export lengthx/checkpoints/mini-t5

A CPU smoke run: --device cpu --d-model 64 --enc-layers 2 --dec-layers 1 --max-steps 20 --batch-size 8"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``scripts/train_mini_t5.py``'s options parsed from ``argv`` (argparse's exit 2 on a bad one)."""
    p = parser()
    args = p.parse_args(argv)
    check(args, p)
    return args


def check(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """The rules between options, refused through ``p.error`` (``lengthx train-mini`` checks them too, before any
    work)."""
    if lookup_forms(args) != ("benchmark",) and args.lines_records != "lookup":
        p.error(f"--lookup-forms {args.lookup_forms} needs --lines-records lookup (token-id records have the "
                "benchmark's form only)")


def lookup_forms(args: argparse.Namespace) -> tuple[str, ...]:
    """The forms of lookup records the curriculum trains in turn (:mod:`lengthx.minis.curriculum`)."""
    return tuple(f.strip() for f in getattr(args, "lookup_forms", "benchmark").split(",") if f.strip())


def forms_value(text: str) -> str:
    """``--lookup-forms``: distinct forms of :data:`lengthx.minis.lookup_data.FORMS`, the benchmark's last."""
    forms = [f.strip() for f in text.split(",") if f.strip()]
    if not set(forms) <= set(FORMS) or len(set(forms)) < len(forms) or not forms or forms[-1] != "benchmark":
        raise argparse.ArgumentTypeError(
            f"{text!r}: give distinct forms of {', '.join(FORMS)}, ending with benchmark (the form the card and the "
            "gate measure), e.g. one-piece,benchmark")
    return ",".join(forms)


def checkpoint_dir(text: str) -> Path:
    """``--init-from``: a folder holding a checkpoint (its ``config.json``), checked before any work."""
    from lengthx.models.loading import ModelNotAvailable, check_checkpoint_dir

    try:  # the harness's own check of a checkpoint folder (config, weights, tokenizer, no code to run)
        check_checkpoint_dir(text, "init_from")
    except ModelNotAvailable as err:
        raise argparse.ArgumentTypeError(
            f"{text}: no checkpoint there ({str(err).split('; ')[0]}). Fix: a mini-t5 export or snapshot folder of the recipe's shape, "
            "relative to where you run (a lookup variant that continues another starts from that variant's last "
            "snapshot: train it first, make mini-t5-lookup-study), or null to start at random") from None
    return Path(text)


def parser() -> argparse.ArgumentParser:
    """The retrieval trainer's options (``lengthx train-mini`` reads their names and kinds from here)."""
    p = argparse.ArgumentParser(prog="scripts/train_mini_t5.py", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="run directory (state.pt, curve.json, export/)")
    p.add_argument("--tokenizer", type=Path, default=TOKENIZER)
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
    p.add_argument("--portable-state", action="store_true",
                   help="also keep OUT/resume.pt (fp16 weights, no optimizer moments) at each save: small enough to "
                        "commit, and resumed from when OUT/state.pt is absent (lengthx.minis.loop)")
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
    p.add_argument("--lines-records", choices=("ids", "lookup"), default="ids",
                   help="ids: the benchmark's lines records as token ids; lookup: records built as text, the asked key "
                        "echoed in the target, --lines-multi of them multi-query (lengthx.minis.lookup_data)")
    p.add_argument("--lines-multi", type=float, default=0.5, help="share of lookup records that ask for every line")
    p.add_argument("--lines-fill", type=float, default=0.0,
                   help="share of lookup records padded with the passkey task's filler to a length uniform between "
                        "their own and L_tr, their lines at drawn depths (lengthx.minis.lookup_data.padded)")
    p.add_argument("--lines-format", choices=("longeval", "short"), default="longeval",
                   help="the lines prompt's header (lengthx.tasks.lines.FORMATS), in training (lookup records) and in "
                        "the card's held-out sets")
    p.add_argument("--lookup-forms", type=forms_value, default="benchmark",
                   help="comma-separated forms of lookup records, trained in turn: each runs the line-count "
                        "curriculum to its full stage before the next begins at one line (benchmark: LongEval's keys "
                        "and values; one-piece: keys of two one-token words, values 1-999; lengthx.minis.lookup_data)")
    p.add_argument("--lookup-label-width", type=int, default=224, help="decoder labels of a multi-query target")
    p.add_argument("--card-lines", default="", help="comma-separated line counts N: the card and the held-out "
                   "evaluations also measure records of exactly N lines at L_tr (lines-n<N>)")
    p.add_argument("--card-fill-lines", default="", help="comma-separated line counts K: the card and the held-out "
                   "evaluations also measure records of exactly K lines padded with filler to L_tr "
                   "(lines-fill-n<K>, task.num_lines=K), part of the bar")
    p.add_argument("--stop-at-gate", action="store_true",
                   help="stop after the first --export-steps snapshot whose card meets the bar at L_tr")
    p.add_argument("--init-from", type=checkpoint_dir, default=None,
                   help="start from this checkpoint's weights (a mini-t5 export of the same shape), not at random")
    return p
