"""Token-exact length fitting (docs/design.md §6): size the filler so the prompt has the requested token count.

As RULER does, the haystack size is found by bisection with the model's own tokenizer, since tokenizers
collapse whitespace and split text unevenly (never count characters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def count_tokens(tokenizer: PreTrainedTokenizerBase, text: str) -> int:
    """Tokens the model's encoder sees, special tokens (e.g. T5's </s>) included."""
    return len(tokenizer(text, add_special_tokens=True)["input_ids"])


def bisect_largest(fits: Callable[[int], bool], lo: int, hi: int) -> int:
    """The bisection every length fit shares: given ``fits(lo)`` and not ``fits(hi)`` (``lo < hi``), the ``k`` in
    ``[lo, hi)`` with ``fits(k)`` and not ``fits(k + 1)``; the largest fitting ``k`` when ``fits`` is monotone."""
    while hi - lo > 1:  # invariant: fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def fit_to_tokens(
    build: Callable[[int], str], tokenizer: PreTrainedTokenizerBase, target_tokens: int, hi: int | None = None
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
    lo = bisect_largest(lambda n: count_tokens(tokenizer, build(n)) <= target_tokens, lo, hi)
    prompt = build(lo)
    return lo, prompt, count_tokens(tokenizer, prompt)


def largest_fitting(fits: Callable[[int], bool], max_k: int, guess: int) -> int:
    """Largest ``k`` in ``[0, max_k]`` with ``fits(k)``, for a monotone predicate (true up to some k).

    Gallops from ``guess`` (doubling or halving) and then bisects, so the strings tokenised stay about the
    size of the answer even when ``max_k`` is huge (a whole book). Returns 0 when nothing fits.
    """
    if max_k <= 0:
        return 0
    k = min(max(1, guess), max_k)
    if fits(k):
        lo = k
        while lo < max_k:
            hi = min(max_k, 2 * lo)
            if not fits(hi):
                break
            lo = hi
        else:
            return max_k
    else:
        hi = k
        lo = k // 2
        while lo > 0 and not fits(lo):
            hi, lo = lo, lo // 2
        if lo == 0:
            return 0
    return bisect_largest(fits, lo, hi)


def chars_per_token(tokenizer: PreTrainedTokenizerBase, text: str) -> float:
    """Characters per token of ``text`` (its last 4000 characters) under ``tokenizer``: a sizing guess."""
    sample = text[-4000:]
    n = len(tokenizer(sample, add_special_tokens=False)["input_ids"])
    return max(1.0, len(sample) / max(1, n))


def suffix_with_tokens(tokenizer: PreTrainedTokenizerBase, text: str, n_tokens: int,
                       add_special_tokens: bool = True) -> str:
    """The longest suffix of ``text`` that has at most ``n_tokens`` tokens (special tokens included when
    ``add_special_tokens``): "the last n tokens" cut at a character, re-tokenisable as the model sees it."""
    def n_of(s: str) -> int:
        return len(tokenizer(s, add_special_tokens=add_special_tokens)["input_ids"])

    guess = int(n_tokens * chars_per_token(tokenizer, text))
    k = largest_fitting(lambda k: n_of(text[len(text) - k:]) <= n_tokens, len(text), guess)
    return text[len(text) - k:]


def prefix_with_tokens(tokenizer: PreTrainedTokenizerBase, text: str, n_tokens: int,
                       add_special_tokens: bool = False) -> str:
    """The longest prefix of ``text`` with at most ``n_tokens`` tokens (no special tokens by default)."""
    def n_of(s: str) -> int:
        return len(tokenizer(s, add_special_tokens=add_special_tokens)["input_ids"])

    guess = int(n_tokens * chars_per_token(tokenizer, text[:4000]))
    return text[:largest_fitting(lambda k: n_of(text[:k]) <= n_tokens, len(text), guess)]


def truncate_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, l_tr: int) -> str:
    """The ``truncation`` baseline (paper A §5.4): keep the most recent ``l_tr`` tokens of the prompt.

    Returns ``prompt`` unchanged when it already fits, else its longest suffix with at most ``l_tr`` tokens
    (the model's special tokens, e.g. T5's ``</s>``, included), so the encoder sees at most L_tr tokens.
    """
    if count_tokens(tokenizer, prompt) <= l_tr:
        return prompt
    return suffix_with_tokens(tokenizer, prompt, l_tr)
