"""``lengthx train-mini recipe=NAME KEY=VALUE …``: train (or resume) a mini stand-in from one of the recipes in
``lengthx/conf/mini/`` (:mod:`lengthx.minis.recipes`), e.g. another seed of the shipped Flan-T5 stand-in:

    lengthx train-mini recipe=first_of_k seed=2 out=runs/mini-t5-seed2

Rerunning the same command resumes; snapshots and the model card are written as the recipe's trainer writes them.
"""

from __future__ import annotations

import textwrap

from lengthx.errors import UsageError

USAGE = "usage: lengthx train-mini recipe=NAME [KEY=VALUE …]   (lengthx train-mini recipe=NAME --help: its keys)"


def help_text(recipe: str | None) -> str:
    """``--help``: the recipes with their descriptions; with a recipe, its keys, values and what each does."""
    from lengthx.minis.recipes import RECIPES_DIR, compose_recipe, options, recipes

    if recipe is None:
        lines = [USAGE, "", f"recipes ({RECIPES_DIR}):"]
        for name, what in recipes().items():
            lines += textwrap.wrap(what, 110, initial_indent=f"  {name:18s} ", subsequent_indent=" " * 21)
        lines += ["", "Every key is an option of the recipe's trainer without its dashes (--max-steps: max_steps);",
                  "rerunning a command resumes it. The card records the trainer's command line in full."]
        return "\n".join(lines)
    trainer, cfg = compose_recipe(recipe, [])
    lines = [USAGE, "", f"recipe={recipe} (trainer {trainer}): KEY=VALUE, the recipe's value in brackets"]
    for key, action in sorted(options(trainer).items()):
        value = cfg.get(key, action.default)
        text = f"[{value}] {action.help or ''}".strip()
        lines += textwrap.wrap(text, 110, initial_indent=f"  {key:20s} ", subsequent_indent=" " * 23)
    return "\n".join(lines)


def train_mini_main(argv: list[str]) -> None:
    """``lengthx train-mini``: one recipe, its overrides; a mistake is one line and exit 2 before any work."""
    recipe = next((a.split("=", 1)[1] for a in argv if a.startswith("recipe=")), None)
    rest = [a for a in argv if not a.startswith("recipe=") and a not in ("-h", "--help")]
    if any(a in ("-h", "--help") for a in argv):
        print(help_text(recipe))
        return
    if recipe is None:
        raise UsageError(f"train-mini: name a recipe, recipe=NAME. {USAGE}; lengthx train-mini --help lists "
                         "them")
    from lengthx.minis.recipes import train_mini

    train_mini(recipe, rest)
