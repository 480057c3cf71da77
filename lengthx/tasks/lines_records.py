"""Lines records that hold exactly K lines at about L tokens: count and length as separate knobs.

LongEval's lines records (:mod:`lengthx.tasks.lines`) grow in lines as they grow in length, so a model's fall past
its training length mixes two things: more tokens and more keys to choose among. ``task.num_lines=K`` with
``task.unit=tokens`` separates them (docs/mini-t5-lookup.md, "The lines study"), as ``task.num_topics`` does for
topics (:mod:`lengthx.tasks.topics_records`): a record of about L tokens holds exactly the K lines of the example's
seeded case (:func:`lengthx.tasks.lines.lines_case_at`: the same keys, values and asked line at every L), each on its
own line and in their order, with the passkey task's filler sentences (:data:`lengthx.tasks.passkey.FILLER_UNIT`,
cycled) around them. The example fixes each line's *depth* (a seeded fraction of the filler before it), so a line
sits at the same relative place at every L; the record has as many whole filler sentences as fit L tokens. With no
filler at all the record is the benchmark's record of K lines.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from lengthx.data.fitting import bisect_largest
from lengthx.tasks.passkey import FILLER_UNIT

SENTENCES = tuple(s + "." for s in re.split(r"\.\s*", FILLER_UNIT) if s)


def depths(k: int, seed: int) -> list[float]:
    """The K lines' depths of example ``seed``: sorted fractions uniform in [0, 1], one per line in order."""
    rng = random.Random(f"lines-depths:{seed}")
    return sorted(rng.random() for _ in range(k))


def filled_body(lines: list[str], where: list[float], sentences: int) -> str:
    """The record's body: ``sentences`` filler sentences with line j (its text, ending in a newline) after
    ``round(where[j] * sentences)`` of them; each run of filler ends with a newline, so each line is on its own."""
    gaps = [round(d * sentences) for d in where]
    body, run = [], []
    for g in range(sentences + 1):
        for j in (j for j, at in enumerate(gaps) if at == g):
            if run:
                body.append(" ".join(run) + "\n")
                run = []
            body.append(lines[j])
        if g < sentences:
            run.append(SENTENCES[g % len(SENTENCES)])
    if run:
        body.append(" ".join(run) + "\n")
    return "".join(body)


def fill_to(prompt: Callable[[int], str], count: Callable[[str], int], target: int) -> tuple[str, int]:
    """``prompt(m)`` at the most whole filler sentences ``m`` that keep it within ``target`` tokens (``count``
    counts a prompt's tokens with the model's tokenizer), and ``m``. ``ValueError`` when even ``prompt(0)`` does not
    fit."""
    need = count(prompt(0))
    if need > target:
        raise ValueError(f"the record without filler needs {need} tokens (header, lines, question), more than {target}")
    hi = 1
    while count(prompt(hi)) <= target:  # doubling: no sentence is shorter than one token
        hi *= 2
    m = bisect_largest(lambda s: count(prompt(s)) <= target, 0, hi)
    return prompt(m), m
