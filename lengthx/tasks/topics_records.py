"""Topics records that hold exactly K conversations at about L tokens: count and length as separate knobs.

LongEval's topics records (:mod:`lengthx.tasks.topics`) grow in conversations as they grow in length, so a model's
fall past its training length mixes two things: more tokens and more topics to choose the first of.
``task.num_topics=K`` with ``task.unit=tokens`` separates them (docs/mini-t5-study.md): a record of about L tokens
holds exactly K conversations, the first K of the example's seeded permutation (so example i asks for the same first
topic at every K and every L), each at least its opening sentence ("USER: I would like to discuss the topic of
<TOPIC>."). Where L needs more text, the conversations grow together, one turn each in turn: first their own turns
(the benchmark's text), then more USER / ASSISTANT exchanges about their subject (:func:`lengthx.tasks.topics.more_exchange`,
generated conversations) or, for LongEval's own file, their own exchanges again. Where L needs less, the
conversations keep only their first turns. The record is cut after a whole turn, or at a word inside the last
conversation's last turn, as the benchmark cuts its last conversation, so that the prompt has at most L tokens; the
header's N is K.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lengthx.data.fitting import bisect_largest, count_tokens

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Prompt = Callable[[list[str], int], str]  # conversation texts and N -> the prompt (lengthx.tasks.topics.topics_prompt)
MoreTurns = Callable[[Any, random.Random], list[str]]  # a conversation -> one more exchange about its subject

_TURN_START = re.compile(r"\s+(?=(?:USER|ASSISTANT): )")
_WORD_END = re.compile(r"\S+")


def turns(conversation: Any) -> list[str]:
    """The conversation's turns ("USER: …", "ASSISTANT: …"), its opening sentence first."""
    return [t for t in _TURN_START.split(conversation.text.strip()) if t]


class _TurnStream:
    """A conversation's turns after its first, then as many more as asked for (generated exchanges about its
    subject, or its own exchanges again)."""

    def __init__(self, conversation: Any, key: str, more: MoreTurns):
        own = turns(conversation)
        self.opening, self.turns = own[0], own[1:]
        self.conversation, self.rng, self.more = conversation, random.Random(key), more
        self.repeat = list(self.turns)

    def get(self, i: int) -> str:
        while len(self.turns) <= i:
            if self.conversation.words:
                self.turns += self.more(self.conversation, self.rng)
            elif self.repeat:
                self.turns += self.repeat
            else:
                raise ValueError(f"the conversation on {self.conversation.topic!r} has one turn and no subject "
                                 "words: it cannot be lengthened")
        return self.turns[i]


def minimal_tokens(conversations: list[Any], tokenizer: PreTrainedTokenizerBase, prompt: Prompt) -> int:
    """Tokens of the shortest record of these conversations: the header, each opening sentence, the question."""
    return count_tokens(tokenizer, prompt([turns(c)[0] for c in conversations], len(conversations)))


def count_fits(conversations: list[Any], k: int, tokenizer: PreTrainedTokenizerBase, prompt: Prompt,
               target: int) -> str | None:
    """Why a record of ``k`` of these conversations may not fit ``target`` tokens, or ``None``: the ``k`` opening
    sentences longest in tokens (the worst draw) with the header and question must fit."""
    if k > len(conversations):
        return f"task.num_topics={k}: only {len(conversations)} conversations are available. Fix: a smaller count"
    openings = [turns(c)[0] for c in conversations]
    sizes = [len(ids) for ids in tokenizer(openings, add_special_tokens=False)["input_ids"]]
    longest = [c for _, c in sorted(zip(sizes, conversations, strict=True), key=lambda pair: pair[0])[-k:]]
    need = minimal_tokens(longest, tokenizer, prompt)
    if need > target:
        return (f"task.num_topics={k}: {k} conversations need up to {need} tokens (header, {k} opening sentences, "
                f"the question) but task.settings has {target}. Fix: a setting of at least {need} tokens, or a "
                "smaller task.num_topics")
    return None


def fixed_count_record(conversations: list[Any], tokenizer: PreTrainedTokenizerBase, target: int, key: str,
                       prompt: Prompt, more: MoreTurns) -> tuple[str, list[int], bool]:
    """A record of exactly ``len(conversations)`` conversations with at most ``target`` tokens, as long as it can
    be (module doc). Returns (prompt, turns kept per conversation, whether the last turn is cut at a word).

    Raises ``ValueError`` naming the tokens needed when the opening sentences alone do not fit."""
    k = len(conversations)
    need = minimal_tokens(conversations, tokenizer, prompt)
    if need > target:
        raise ValueError(f"{k} conversations need at least {need} tokens (header, {k} opening sentences and the "
                         f"question) but the setting has {target}")
    streams = [_TurnStream(c, f"{key}:{j}", more) for j, c in enumerate(conversations)]

    def record(rounds: int) -> list[tuple[int, str]]:  # (conversation, turn) in the order they are added
        return [(j, streams[j].get(r)) for r in range(rounds) for j in range(k)]

    def build(additions: list[tuple[int, str]], cut: tuple[int, int] | None) -> str:
        parts = [[s.opening] for s in streams]
        for a, (j, text) in enumerate(additions):
            if cut is not None and a == cut[0]:
                parts[j].append(text[: cut[1]])
                break
            parts[j].append(text)
        return prompt([" ".join(p) for p in parts], k)

    rounds = 1  # enough rounds to pass the target (doubling keeps the strings tokenised near its size)
    while count_tokens(tokenizer, build(record(rounds), None)) <= target:
        rounds *= 2
    additions = record(rounds)
    cuts: list[tuple[int, int] | None] = [None]  # after a whole addition a (a + 1 of them), or inside the last one
    for a, (j, text) in enumerate(additions):
        if j == k - 1:
            ends = [m.end() for m in _WORD_END.finditer(text)]
            cuts += [(a, e) for e in ends[:-1]]
        cuts.append((a + 1, 0))

    def prompt_at(i: int) -> str:
        c = cuts[i]
        if c is None:
            return build([], None)
        a, end = c
        return build(additions[: a + 1], (a, end)) if end else build(additions[:a], None)

    i = bisect_largest(lambda i: count_tokens(tokenizer, prompt_at(i)) <= target, 0, len(cuts) - 1)
    c = cuts[i]
    whole = 0 if c is None else c[0] + (1 if c[1] else 0)
    kept = [1 + sum(1 for j, _ in additions[:whole] if j == jj) for jj in range(k)]
    return prompt_at(i), kept, bool(c and c[1])
