"""The minis' recipes as configs (docs/design.md, "The minis' trainers"): ``lengthx/conf/mini/<recipe>.yaml`` names
its trainer and sets that trainer's options; ``lengthx train-mini recipe=NAME KEY=VALUE …`` composes it with Hydra,
checks every key against the trainer's own options, and runs the trainer with them.

A recipe's keys are its trainer's options, spelled as the option without its dashes (``--max-steps`` is
``max_steps``). The trainers are the ones ``scripts/train_mini_*.py`` run, with the same options, so a recipe
trains the weights the script does with those options, bit for bit, and the card records the resolved options as
the script's command line (what a later reader reruns, whatever the recipe file says by then). A recipe may build
on another through Hydra's defaults list (a study's variant on the study's recipe: ``lookup_pieces`` on ``lookup``).
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from dataclasses import dataclass
from typing import Any

from lengthx.config import CONF_DIR
from lengthx.errors import UsageError

RECIPES_DIR = CONF_DIR / "mini"


@dataclass(frozen=True)
class Trainer:
    """A mini's trainer: the module whose ``parser()`` holds its options and whose ``main(argv)`` trains."""

    options: str  # module with parser()
    run: str  # module with main(argv)
    script: str  # the script that runs it, as the cards name it


TRAINERS = {
    "retrieval": Trainer("lengthx.minis.retrieval_args", "lengthx.minis.retrieval", "scripts/train_mini_t5.py"),
    "t5_lm": Trainer("lengthx.minis.t5_lm", "lengthx.minis.t5_lm", "scripts/train_mini_t5_lm.py"),
    "decoders": Trainer("lengthx.minis.decoders", "lengthx.minis.decoders", "scripts/train_mini_decoders.py"),
}


def recipes() -> dict[str, str]:
    """Each shipped recipe's name and the first line of its description (its leading comment)."""
    out = {}
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        lines = [ln[1:].strip() for ln in path.read_text(encoding="utf-8").splitlines()
                 if ln.startswith("#") and not ln.startswith("# @package")]
        out[path.stem] = lines[0] if lines else ""
    return out


def options(trainer: str, parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.Action]:
    """The options of ``trainer`` (of ``parser``, its parser, when given) by recipe key (``max_steps`` for
    ``--max-steps``)."""
    parser = parser or importlib.import_module(TRAINERS[trainer].options).parser()
    return {a.option_strings[-1].lstrip("-").replace("-", "_"): a for a in parser._actions
            if a.option_strings and a.dest != "help"}


def compose_recipe(name: str, overrides: list[str]) -> tuple[str, dict[str, Any]]:
    """(trainer, resolved options) of recipe ``name`` under ``overrides`` (``KEY=VALUE``); a recipe, key or value
    that is not one is a :class:`UsageError` naming it and the fix."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from lengthx.config import compose

    known = recipes()
    if name not in known:
        raise UsageError(f"recipe={name}: no such recipe. The recipes ({RECIPES_DIR}): {', '.join(known)}")
    raw = OmegaConf.load(RECIPES_DIR / f"{name}.yaml")
    if "defaults" in raw:  # a recipe built on another (a study's variant on its study's recipe): its whole config
        try:
            raw = compose([], config_name=f"mini/{name}")
        except HydraException as err:
            raise UsageError(f"{RECIPES_DIR / name}.yaml: {err}".replace("\n", " ")) from None
    trainer = str(raw.get("trainer"))
    if trainer not in TRAINERS:
        raise UsageError(f"{RECIPES_DIR / name}.yaml: trainer: {trainer} is not a trainer; one of {', '.join(TRAINERS)}")
    valid = options(trainer)
    bad = [k for k in raw if k != "trainer" and k not in valid]
    if bad:
        raise UsageError(f"{RECIPES_DIR / name}.yaml: {bad[0]} is not an option of the {trainer} trainer")
    composed = []
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+")
        if "=" not in item or key not in valid:
            raise UsageError(f"train-mini recipe={name}: {item!r} is not KEY=VALUE of one of its options. "
                             f"Its options: {', '.join(sorted(valid))} (lengthx train-mini recipe={name} --help)")
        composed.append(item if key in raw or item.startswith("+") else f"+{item}")
    try:
        cfg = OmegaConf.to_container(compose(composed, config_name=f"mini/{name}"), resolve=True)
    except HydraException as err:
        raise UsageError(f"train-mini recipe={name}: {err}".replace("\n", " ")) from None
    assert isinstance(cfg, dict)
    cfg.pop("trainer", None)
    return trainer, cfg


def to_argv(trainer: str, cfg: dict[str, Any]) -> list[str]:
    """The trainer's command line for the resolved options ``cfg`` (null: the trainer's default; a list: the
    values of a many-valued option, else joined by commas), checked by its own parser and its ``check`` (the rules
    between options), where it has one."""
    module = importlib.import_module(TRAINERS[trainer].options)
    parser = module.parser()
    valid = options(trainer, parser)
    argv: list[str] = []
    for key, value in cfg.items():
        action, flag = valid[key], valid[key].option_strings[-1]
        if value is None:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            argv += [flag] if value else []
        elif isinstance(value, list):
            argv += [flag, *map(str, value)] if action.nargs in ("+", "*") else [flag, ",".join(map(str, value))]
        else:
            argv += [flag, str(value)]

    def refuse(message: str) -> None:
        message = re.sub(r"argument --([\w-]+)", lambda m: m.group(1).replace("-", "_"), message)
        raise UsageError(f"train-mini: {message} (as {TRAINERS[trainer].script} reads it)")

    parser.error = refuse  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    if hasattr(module, "check"):  # the trainer's rules between options
        module.check(args, parser)
    return argv


def train_mini(name: str, overrides: list[str]) -> None:
    """Train (or resume) recipe ``name`` with ``overrides``."""
    trainer, cfg = compose_recipe(name, overrides)
    argv = to_argv(trainer, cfg)
    print(f"lengthx train-mini recipe={name}: python {TRAINERS[trainer].script} {shlex.join(argv)}", flush=True)
    importlib.import_module(TRAINERS[trainer].run).main(argv)
