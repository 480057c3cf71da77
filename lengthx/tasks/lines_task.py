"""Line retrieval (LongEval "lines", Li et al. 2023) as a runnable task; paper A §5.2 / Table 4.

The prompt format, the adjective-noun line indices and the seeded cases are those of
:mod:`lengthx.tasks.lines` (docs/design.md §10, verbatim benchmark text). Settings are either a number of lines
(unit ``lines``, the paper's 200…680) or a requested token count (unit ``tokens``): the number of lines is
then the largest whose prompt fits, found by bisection with the model's own tokenizer
(:func:`~lengthx.tasks.lines.fit_lines_case`). Score (docs/design.md §6): the last integer of the output equals the
asked line's REGISTER_CONTENT. Upstream used 50 cases per setting, the asked line uniform.
"""

from __future__ import annotations

from lengthx.data.fitting import count_tokens
from lengthx.metrics import lines_correct
from lengthx.tasks.base import Example, Setting
from lengthx.tasks.lines import fit_lines_case, lines_case_at


def case_seed(seed: int, i: int) -> int:
    """The seed of example ``i`` of a run seeded ``seed`` (distinct for every (seed, i) below 10^6 cases).

    Each example has its own seed, so example ``i`` is the same whatever the other examples or the
    setting: at 200 and at 300 lines its indices are prefixes of one sequence (``lines_case_at``)."""
    return seed * 1_000_003 + i


class LinesTask:
    """LongEval lines: seeded records of ``line <idx>: REGISTER_CONTENT is <n>``, last-integer scoring."""

    name = "lines"
    metrics = ("accuracy",)

    def __init__(self, max_new_tokens: int = 100, max_lines: int = 2000):
        self.max_new_tokens = max_new_tokens
        self.max_lines = max_lines

    def examples(self, setting: Setting, tokenizer, n: int, seed: int) -> list[Example]:
        """``n`` examples at ``setting`` (a number of lines, or a token count fitted by bisection)."""
        out = []
        for i in range(n):
            s = case_seed(seed, i)
            if setting.unit == "lines":
                case, requested = lines_case_at(setting.value, s), None
            elif setting.unit == "tokens":
                requested = setting.value
                case = fit_lines_case(s, lambda p: count_tokens(tokenizer, p), requested, self.max_lines)
            else:
                raise ValueError(f"lines settings are in lines or tokens, not {setting.unit!r}")
            prompt = case.prompt
            out.append(Example(f"{seed}-{i}", prompt, case.answer, requested, count_tokens(tokenizer, prompt),
                               {"n_lines": len(case.pairs), "query_idx": case.query_idx,
                                "query_position": case.query}))
        return out

    def score(self, output: str, example: Example) -> dict[str, float]:
        """100 when the last integer of the output is the asked line's number, else 0."""
        return {"accuracy": 100.0 * lines_correct(output, example.target)}
