"""Scoring rules of the reference benchmarks (DESIGN §6): each function scores one prediction."""

from __future__ import annotations

import re

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
