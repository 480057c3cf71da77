"""Scoring rules of the reference benchmarks (DESIGN §6): each function scores one prediction."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

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


# ---- multi-document QA (Lost in the Middle) -------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD answer normalisation: lower case, drop punctuation, drop the articles a/an/the, collapse spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def best_subspan_em(prediction: str, answers: Sequence[str]) -> float:
    """Lost in the Middle's best-subspan exact match (DESIGN §6): 1.0 when a normalised gold answer is a
    substring of the normalised prediction, else 0.0.

    As upstream, the prediction is first cut at its first newline (the model's answer is its first line);
    normalisation is SQuAD's (:func:`normalize_answer`).
    """
    pred = normalize_answer(prediction.split("\n")[0])
    return float(any(normalize_answer(a) in pred for a in answers if normalize_answer(a)))


# ---- topic retrieval (LongEval topics) ------------------------------------------------------------------


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


# ---- code completion (LCC; CodeXGLUE line-level metrics) ---------------------------------------------


def first_line(output: str) -> str:
    """The prediction of a next-line completion: the first line of the output, leading newlines skipped."""
    return output.lstrip("\r\n").split("\n")[0]


def code_exact_match(pred: str, gt: str) -> bool:
    """Line-level exact match (CodeXGLUE / LCC): equal whitespace-separated token sequences."""
    return pred.split() == gt.split()


def edit_similarity(pred: str, gt: str) -> float:
    """Line-level edit similarity in 0..100: fuzzywuzzy's ``fuzz.ratio`` without its rounding.

    That is the normalised Indel similarity ``(1 - indel_distance / (len(pred) + len(gt))) * 100`` (two
    empty strings are equal: 100), which ``rapidfuzz.fuzz.ratio`` computes exactly.
    """
    from rapidfuzz import fuzz

    return float(fuzz.ratio(pred, gt))


# ---- code key retrieval -----------------------------------------------------------------------------------


def code_key_correct(output: str, key: int) -> bool:
    """Code key retrieval: the first integer of the completion equals the function's return value."""
    return passkey_correct(output, key)
