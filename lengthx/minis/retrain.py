"""Retrain the first steps of a shipped mini from the command its card records, and read the rows of its curve
(docs/design.md, "The minis' trainers"): the same recipe and seed give the shipped run's first logged losses."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import torch

from lengthx.minis.loop import Box, TrainingLoop

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


def recorded_command(name: str) -> list[str]:
    """The options of the command that trained the shipped mini ``name`` (its ``lengthx_mini.json``, else the
    ``curve.json`` summary of mini-t5), without the script."""
    ckpt = CHECKPOINTS / name
    meta = ckpt / "lengthx_mini.json"
    command = json.loads(meta.read_text())["command"] if meta.is_file() else \
        json.loads((ckpt / "curve.json").read_text())["command"]
    words = shlex.split(command)
    return words[2:]  # "python scripts/train_mini_….py" first


def shipped_curve(name: str) -> list[dict[str, Any]]:
    """The curve rows the shipped mini ``name`` was trained through."""
    curve = json.loads((CHECKPOINTS / name / "curve.json").read_text())
    return curve["curve"] if isinstance(curve, dict) else curve


def _options(argv: list[str], drop: tuple[str, ...]) -> list[str]:
    """``argv`` without the options in ``drop`` (each followed by one value)."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in drop:
            skip = True
        else:
            out.append(word)
    return out


def retrain_rows(name: str, work: Path, steps: int) -> list[dict[str, Any]]:
    """Run the recipe of the shipped mini ``name`` (same options and seed, its schedule untouched) for ``steps``
    steps in ``work`` and return its curve rows; nothing is exported or evaluated on held-out sets."""
    argv = recorded_command(name)
    if name == "mini-t5":
        from transformers import AutoTokenizer

        from lengthx.minis.retrieval import RetrievalRecipe
        from lengthx.minis.retrieval_args import parse_args

        args = parse_args(_options(argv, ("--out", "--snapshots-to", "--export")) + ["--out", str(work), "--eval-every",
                                                                                    str(10**9)])
        tok = AutoTokenizer.from_pretrained(str(args.tokenizer), trust_remote_code=False)
        recipe: Any = RetrievalRecipe(args, tok, torch.device("cpu"), "CPU", "")
        recipe.export_steps = set()
        box = Box(args.max_steps, args.max_minutes, stop_step=steps)
        state = {"step": 0, "train_seconds": 0.0, "examples": 0, "curve": [], "stopped": None}
        loop = TrainingLoop(work, recipe.model, recipe.optimizer, recipe, box, state, seconds_key="train_seconds")
    elif name == "mini-t5-lm":
        from lengthx.minis.t5_lm import LMRecipe, parse_args

        args = parse_args(_options(argv, ("--out", "--export")) + ["--out", str(work), "--snapshots", ""])
        recipe = LMRecipe(args)
        loop = TrainingLoop(work, recipe.model, recipe.optimizer, recipe, Box(args.steps, stop_step=steps), {})
    else:
        from transformers import AutoTokenizer

        from lengthx.minis.decoders import DecoderRecipe, parse_args

        args = parse_args(_options(argv, ("--work", "--out", "--summary")) + ["--work", str(work)])
        tok = AutoTokenizer.from_pretrained(str(CHECKPOINTS / name), trust_remote_code=False)
        recipe = DecoderRecipe(name.removeprefix("mini-"), args, tok)
        loop = TrainingLoop(recipe.work / "train", recipe.model, recipe.optimizer, recipe,
                            Box(recipe.plan.steps, stop_step=steps), {})
    loop.run()
    return loop.state["curve"]
