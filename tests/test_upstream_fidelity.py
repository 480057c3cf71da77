"""The benchmarks as their own code runs them (docs/design.md §6, §10): LongEval's line indices and released
test cases, LongCoder's LCC evaluation, Lost in the Middle's metric. Each test pins a behaviour of the upstream
code on a small input."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from lengthx.tasks.base import Example, Setting
from lengthx.tasks.code_completion import CodeCompletionTask, collapse_newlines, drop_blank_lines
from lengthx.tasks.lines import line_index_vocabulary, lines_case_at
from lengthx.tasks.metrics import (
    best_subspan_em,
    code_exact_match,
    code_tokens,
    edit_similarity,
    first_line,
    fuzz_ratio,
    lcc_code,
    normalize_answer,
)


def _split_index(idx: str, adjectives: set[str], nouns: set[str]) -> tuple[str, str]:
    """The (adjective, noun) an index ``adjective-noun`` is made of (words may hold a hyphen themselves)."""
    splits = [(idx[:k], idx[k + 1:]) for k, ch in enumerate(idx) if ch == "-"]
    (pair,) = [(a, n) for a, n in splits if a in adjectives and n in nouns]
    return pair


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lines_record_of_680_repeats_no_adjective_and_no_noun(seed):
    """LongEval's ``generate_line_index`` draws n adjectives and n nouns, each without replacement."""
    adjectives, nouns = map(set, line_index_vocabulary())
    case = lines_case_at(680, seed)
    words = [_split_index(idx, adjectives, nouns) for idx, _ in case.pairs]
    assert len(words) == 680
    assert max(Counter(a for a, _ in words).values()) == 1
    assert max(Counter(n for _, n in words).values()) == 1


def test_lines_shorter_record_is_a_prefix_of_a_longer_one():
    """Fitting a record to a token count bisects on its number of lines: the indices must nest."""
    short, long = lines_case_at(200, 11), lines_case_at(680, 11)
    assert [i for i, _ in short.pairs] == [i for i, _ in long.pairs[:200]]
    assert [v for _, v in short.pairs] == [v for _, v in long.pairs[:200]]


def test_lines_refuse_more_lines_than_words():
    most = min(map(len, line_index_vocabulary()))
    with pytest.raises(ValueError, match="distinct adjectives and nouns"):
        lines_case_at(most + 1, 0)
    assert len(lines_case_at(most, 0).pairs) == most


# ---- LCC as LongCoder's run.py evaluates it -------------------------------------------------------------------


def _scored(output: str, target: str) -> dict[str, float]:
    return CodeCompletionTask().score(output, Example("0", "", target, None, 0))


def test_code_output_starting_with_a_newline_predicts_the_empty_line():
    """``text[:text.index("\\n")]``: the first line of "\\n    return x" is "", which scores EM 0 and ES 0."""
    assert first_line("\n    return x") == ""
    assert _scored("\n    return x", "return x") == {"exact_match": 0.0, "edit_similarity": 0.0}
    assert _scored("    return x\nfoo()", "return x") == {"exact_match": 100.0, "edit_similarity": 100.0}
    assert first_line("return x") == "return x"  # no newline: the whole output


def test_code_string_literal_is_one_token_and_es_is_an_integer():
    """tree-sitter's ``string`` node is one token, spaces inside included; ``fuzz.ratio`` reports an integer:
    "print ( 'hello  world' )" vs "print ( 'hello world' )" is round(100 · 46/47) = 98, and EM (whitespace
    split of the joined tokens) still matches."""
    pred, gt = "print('hello  world')", "print('hello world')"
    assert code_tokens(pred) == ["print", "(", "'hello  world'", ")"]
    assert lcc_code(pred) == "print ( 'hello  world' )"
    assert edit_similarity(pred, gt) == 98.0
    assert code_exact_match(pred, gt)
    assert _scored(pred, gt) == {"exact_match": 100.0, "edit_similarity": 98.0}
    assert code_tokens("x = 1  # two words") == ["x", "=", "1", "# two words"]  # a comment is one token too


def test_fuzz_ratio_is_fuzzywuzzy_with_levenshtein():
    assert fuzz_ratio("", "") == 100 and fuzz_ratio("", "abc") == 0 and fuzz_ratio("abc", "abc") == 100
    assert fuzz_ratio("abcd", "abce") == 75  # Indel distance 2 of 8 characters
    assert fuzz_ratio("a" * 39, "a" * 40) == 99  # 78/79 = 98.73... rounds up
    assert isinstance(fuzz_ratio("ab", "ba"), int)


def test_lcc_context_newlines_collapse_as_upstream():
    """``re.sub("\\n+", "\\n", source)``: a whitespace-only line and one leading newline stay."""
    assert collapse_newlines("a\n    \nb\n") == "a\n    \nb\n"
    assert collapse_newlines("\n\na\n\n\nb\n\n") == "\na\nb\n"
    assert drop_blank_lines("a\n    \nb\n") == "a\nb\n"  # the offline stand-ins' own rule


def test_lcc_rows_read_from_a_file_keep_whitespace_only_lines(tmp_path, byt5):
    path = tmp_path / "lcc.jsonl"
    context = "def f():\n    x = 1\n    \n\n\n    return x\n"
    path.write_text(json.dumps({"context": context, "gt": "f()"}) + "\n")
    task = CodeCompletionTask(source="jsonl", data_path=str(path))
    (ex,) = task.examples(Setting("0", 0, "bucket"), byt5, 1, seed=0)
    assert ex.prompt == "def f():\n    x = 1\n    \n    return x\n"


# ---- Lost in the Middle -------------------------------------------------------------------------------------


def test_mdqa_answer_normalising_to_nothing_scores_one():
    """An answer that normalises to "" is a substring of every prediction: upstream's metric scores 1.0."""
    assert normalize_answer("The") == ""
    assert best_subspan_em("something else entirely", ["The"]) == 1.0
    assert best_subspan_em("London", ["a", "Paris"]) == 1.0
    assert best_subspan_em("London", ["Paris"]) == 0.0
