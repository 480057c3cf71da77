"""Scoring rules of the reference benchmarks (docs/design.md §6): each function scores one prediction."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from functools import lru_cache

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
    normalisation is SQuAD's (:func:`normalize_answer`).
    """
    pred = normalize_answer(prediction.split("\n")[0])
    return float(any(normalize_answer(a) in pred for a in answers if normalize_answer(a)))


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
    """The prediction of a next-line completion: the first line of the output, leading newlines skipped."""
    return output.lstrip("\r\n").split("\n")[0]


@lru_cache(maxsize=1)
def _python_parser():
    import tree_sitter_python
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_python.language()))


def code_tokens(line: str) -> list[str]:
    """The code tokens of one line, as LongCoder's LCC evaluation compares them: tree-sitter's leaves.

    The line is parsed with tree-sitter's Python grammar (a lone line such as ``else:`` parses with error
    nodes, whose leaves are still its tokens); zero-width nodes the parser inserts are skipped. When the
    leaves do not spell the line's non-space characters exactly (a construct the grammar splits oddly),
    the line falls back to whitespace tokens, CodeXGLUE's plain ``split()``.
    """
    tree = _python_parser().parse(line.encode("utf-8"))
    tokens: list[str] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.child_count == 0 or node.type in ("string_content", "comment"):
            text = line.encode("utf-8")[node.start_byte:node.end_byte].decode("utf-8", errors="replace")
            if text:
                tokens.append(text)
        else:
            stack.extend(reversed(node.children))
    if "".join(tokens).replace(" ", "").replace("\t", "") != "".join(line.split()):
        return line.split()
    return [w for t in tokens for w in (t.split() if t.strip() else [])]


def code_exact_match(pred: str, gt: str) -> bool:
    """Line-level exact match (LCC, as LongCoder evaluates it): equal code-token sequences, so
    ``f(a,b)`` matches ``f(a, b)``; see :func:`code_tokens`."""
    return code_tokens(pred) == code_tokens(gt)


def edit_similarity(pred: str, gt: str) -> float:
    """Line-level edit similarity in 0..100: fuzzywuzzy's ``fuzz.ratio`` without its rounding, of the two
    lines' code tokens joined by single spaces (LongCoder's LCC evaluation; :func:`code_tokens`).

    ``fuzz.ratio`` is the normalised Indel similarity ``(1 - indel_distance / (len(a) + len(b))) * 100``
    (two empty strings are equal: 100), which ``rapidfuzz.fuzz.ratio`` computes exactly.
    """
    from rapidfuzz import fuzz

    return float(fuzz.ratio(" ".join(code_tokens(pred)), " ".join(code_tokens(gt))))


def code_key_correct(output: str, key: int) -> bool:
    """Code key retrieval: the first integer of the completion equals the function's return value."""
    return passkey_correct(output, key)
