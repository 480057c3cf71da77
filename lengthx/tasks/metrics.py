"""Scoring rules of the reference benchmarks (docs/design.md §6): each function scores one prediction."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

_INT = re.compile(r"\d+")


def _integers(text: str) -> list[int]:
    return [int(m) for m in _INT.findall(text)]


def passkey_correct(output: str, key: int) -> bool:
    """Passkey (Landmark Attention): the first integer in the output equals the key."""
    found = _integers(output)
    return bool(found) and found[0] == int(key)


def lines_correct(output: str, expected: int) -> bool:
    """LongEval lines: the last integer in the output equals the register content."""
    found = _integers(output)
    return bool(found) and found[-1] == int(expected)


_ARTICLES = re.compile(r"\b(a|an|the)\b")


_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD answer normalisation: lower case, drop punctuation, drop the articles a/an/the, collapse spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def best_subspan_em(prediction: str, answers: Sequence[str]) -> float:
    """Lost in the Middle's best-subspan exact match (docs/design.md §6): 1.0 when a normalised gold answer is a
    substring of the normalised prediction, else 0.0.

    As upstream, the prediction is first cut at its first newline (the model's answer is its first line);
    normalisation is SQuAD's (:func:`normalize_answer`). A gold answer that normalises to "" is a substring of
    every prediction, so it scores 1.0, as upstream's ``metrics.py`` scores it.
    """
    pred = normalize_answer(prediction.split("\n")[0])
    return float(any(normalize_answer(a) in pred for a in answers))


def topic_correct(output: str, topic: str) -> bool:
    """LongEval topics, scored without a judge model: the normalised first topic is contained, as a whole
    run of words, in the normalised output.

    Both sides go through :func:`normalize_answer` (case, punctuation and articles dropped, spaces
    collapsed), so "The history of jazz!" matches the topic "history of jazz"; the match must start and end
    at word boundaries, so the topic "art" is not found in "party". Upstream LongEval asked a GPT model
    whether the output names the topic; this rule is the documented offline stand-in.
    """
    want = normalize_answer(topic)
    return bool(want) and f" {want} " in f" {normalize_answer(output)} "


def first_line(output: str) -> str:
    """The prediction of a next-line completion, as LongCoder's LCC evaluation takes it: the output up to its first
    newline (``text[:text.index("\n")]``), so an output that starts with a newline predicts the empty line."""
    return output.split("\n", 1)[0]


@lru_cache(maxsize=1)
def _python_parser():
    import tree_sitter_python
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_python.language()))


def code_tokens(line: str, parser: Any = None) -> list[str]:
    """The code tokens of one line, as LongCoder's LCC evaluation (``tokenize_code``) takes them from tree-sitter's
    Python parse: every leaf, except that a ``string`` node (quotes, prefix and inner spaces included) and a comment
    are one token each; a zero-width node the parser inserts for a missing token is an empty token. A lone line
    such as ``else:`` parses with error nodes, whose leaves are still its tokens. ``parser``: another tree-sitter
    parser than Python's (to measure what a grammar changes)."""
    data = line.encode("utf-8")
    tokens: list[str] = []
    stack = [(parser or _python_parser()).parse(data).root_node]
    while stack:
        node = stack.pop()
        if node.child_count == 0 or node.type == "string" or "comment" in node.type:
            tokens.append(data[node.start_byte:node.end_byte].decode("utf-8", errors="replace"))
        else:
            stack.extend(reversed(node.children))
    return tokens


def lcc_code(line: str) -> str:
    """A line as LongCoder's LCC evaluation compares it: its :func:`code_tokens` joined by single spaces."""
    return " ".join(code_tokens(line))


def code_exact_match(pred: str, gt: str) -> bool:
    """Line-level exact match as LongCoder's LCC evaluation: ``pred.split() == gt.split()`` of the two lines'
    :func:`lcc_code`, so ``f(a,b)`` matches ``f(a, b)`` (and spaces inside a string literal do not count)."""
    return lcc_code(pred).split() == lcc_code(gt).split()


def fuzz_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's ``fuzz.ratio`` with python-Levenshtein: 100 for equal strings, 0 when one is empty, else the
    normalised Indel similarity ``(len a + len b − distance) / (len a + len b)`` × 100 rounded to an integer
    (Python's ``round``); ``rapidfuzz`` computes the distance."""
    from rapidfuzz.distance import Indel

    if a == b:
        return 100
    if not a or not b:
        return 0
    total = len(a) + len(b)
    return int(round(100 * ((total - Indel.distance(a, b)) / total)))


def edit_similarity(pred: str, gt: str) -> float:
    """Line-level edit similarity (0-100, an integer as LongCoder reports it): :func:`fuzz_ratio` of the two lines'
    :func:`lcc_code`."""
    return float(fuzz_ratio(lcc_code(pred), lcc_code(gt)))


def code_key_correct(output: str, key: int) -> bool:
    """Code key retrieval: the first integer of the completion equals the function's return value."""
    return passkey_correct(output, key)
