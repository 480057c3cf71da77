"""Token-exact length fitting (docs/design.md §6): size the filler so the prompt has the requested token count.

As RULER does, the haystack size is found by bisection with the model's own tokenizer, since tokenizers
collapse whitespace and split text unevenly (never count characters).
"""

from __future__ import annotations

from collections.abc import Callable


def count_tokens(tokenizer, text: str) -> int:
    """Tokens the model's encoder sees, special tokens (e.g. T5's </s>) included."""
    return len(tokenizer(text, add_special_tokens=True)["input_ids"])


def fit_to_tokens(
    build: Callable[[int], str], tokenizer, target_tokens: int, hi: int | None = None
) -> tuple[int, str, int]:
    """Largest size ``n`` (e.g. filler characters) with ``count_tokens(build(n)) <= target_tokens``.

    Returns (n, prompt, actual_tokens). ``build`` must be monotone in its argument's token count.
    Raises ValueError when even ``build(0)`` exceeds the target.
    """
    base = count_tokens(tokenizer, build(0))
    if base > target_tokens:
        raise ValueError(f"the prompt without filler already has {base} tokens > requested {target_tokens}")
    lo = 0
    if hi is None:
        hi = max(64, 8 * target_tokens)
        while count_tokens(tokenizer, build(hi)) <= target_tokens:
            lo, hi = hi, hi * 2
    while hi - lo > 1:  # invariant: build(lo) fits, build(hi) does not
        mid = (lo + hi) // 2
        if count_tokens(tokenizer, build(mid)) <= target_tokens:
            lo = mid
        else:
            hi = mid
    prompt = build(lo)
    return lo, prompt, count_tokens(tokenizer, prompt)
