"""Passkey retrieval (Mohtashami & Jaggi, 2023, Landmark Attention), as used in paper A §5.2 / Table 4.

Format (docs/design.md §6, a benchmark fact): an intro sentence, a prefix of filler, the pass-key sentence,
a suffix of filler and the question, joined by newlines. The filler is the 5-sentence unit repeated and
sliced by characters from its start, for the prefix and again for the suffix: upstream cuts both from the
start of the same repeated text (``garbage_inf[:n_garbage_prefix]``, ``garbage_inf[:n_garbage_suffix]``), so
the suffix starts again at "The grass is green." instead of continuing where the prefix stopped. Settings are either ``n_garbage`` characters (the paper's 20k…55k) or
a requested token count, fitted with the model's own tokenizer by bisection on ``n_garbage``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from lengthx.data.fitting import count_tokens, fit_to_tokens
from lengthx.data.provenance import SYNTHETIC
from lengthx.tasks.base import Example, Setting, Task
from lengthx.tasks.metrics import passkey_correct

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
    "I will quiz you about the important information there."
)
FILLER_UNIT = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = "What is the pass key? The pass key is"
KEY_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
MAX_KEY = 50000


def filler(n_chars: int) -> str:
    """The filler unit repeated and cut to exactly ``n_chars`` characters from its start."""
    reps = n_chars // len(FILLER_UNIT) + 1
    return " ".join([FILLER_UNIT] * reps)[:n_chars]


def passkey_prompt(key: int, n_garbage: int, prefix_chars: int) -> str:
    """The passkey prompt with ``n_garbage`` filler characters, ``prefix_chars`` of them before the key.

    Prefix and suffix are each cut from the start of the filler (:func:`filler`), as upstream does."""
    if not 0 <= prefix_chars <= n_garbage:
        raise ValueError(f"prefix_chars={prefix_chars} must lie in [0, n_garbage={n_garbage}]")
    return "\n".join([INTRO, filler(prefix_chars), KEY_LINE.format(key=key), filler(n_garbage - prefix_chars),
                      QUESTION])


@dataclass(frozen=True)
class PasskeyCase:
    """One passkey example before length fitting: the key and the relative depth of the key sentence."""

    key: int
    depth: float  # prefix length / n_garbage, uniform in [0, 1] as upstream's uniform prefix length


def passkey_cases(n: int, seed: int) -> list[PasskeyCase]:
    """``n`` seeded cases; the same seed gives the same keys and depths for every method and model."""
    rng = random.Random(seed)
    return [PasskeyCase(key=rng.randint(1, MAX_KEY), depth=rng.random()) for _ in range(n)]


def case_prompt(case: PasskeyCase, n_garbage: int) -> str:
    """The prompt of ``case`` at ``n_garbage`` filler characters."""
    return passkey_prompt(case.key, n_garbage, int(round(case.depth * n_garbage)))


class PasskeyTask(Task):
    """Passkey retrieval as a runnable task: seeded cases, fitted lengths, first-integer scoring."""

    name = "passkey"
    metrics = ("accuracy",)
    units = ("chars", "tokens")  # what task.unit may name (the unit of explicit task.settings)

    def __init__(self, max_new_tokens: int = 10):
        self.max_new_tokens = max_new_tokens

    def data_source(self, setting: Setting) -> str:
        """``synthetic``: the benchmark generates its examples, upstream too (lengthx.data.provenance)."""
        return SYNTHETIC

    def examples(self, setting: Setting, tokenizer: PreTrainedTokenizerBase, n: int, seed: int) -> list[Example]:
        """``n`` examples at ``setting`` (n_garbage characters, or a token count fitted by bisection)."""
        out = []
        for i, case in enumerate(passkey_cases(n, seed)):
            if setting.unit == "chars":
                n_garbage, requested = setting.value, None
                prompt = case_prompt(case, n_garbage)
                actual = count_tokens(tokenizer, prompt)
            elif setting.unit == "tokens":
                requested = setting.value
                n_garbage, prompt, actual = fit_to_tokens(partial(case_prompt, case), tokenizer, requested)
            else:
                raise ValueError(f"passkey settings are in chars or tokens, not {setting.unit!r}")
            out.append(Example(f"{seed}-{i}", prompt, case.key, requested, actual,
                               {"n_garbage": n_garbage, "depth": case.depth}))
        return out

    def score(self, output: str, example: Example) -> dict[str, float]:
        return {"accuracy": 100.0 * passkey_correct(output, example.target)}
