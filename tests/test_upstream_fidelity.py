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


# ---- LongEval's released test cases (task.testcases_dir) ----------------------------------------------------

LINES_CASE_PROMPT = (
    "Below is a record of lines I want you to remember. Each line begins with 'line <line index>' and contains a "
    "'<REGISTER_CONTENT>' at the end of the line as a numerical value. For each line index, memorize its "
    "corresponding <REGISTER_CONTENT>. At the end of the record, I will ask you to retrieve the corresponding "
    "<REGISTER_CONTENT> of a certain line index. Now the record start:\n\nline torpid-kid: REGISTER_CONTENT is "
    "<2416>\nline oval-underpants: REGISTER_CONTENT is <33851>\n\nNow the record is over. Tell me what is the "
    "<REGISTER_CONTENT> in line torpid-kid? I need the number. "
)
TOPICS_CASE_PROMPT = (
    "Below is a record of our previous conversation on 2 different topics. You are the ASSISTANT, and I am the "
    "USER. At the beginning of each topic, the USER will say 'I would like to discuss the topic of <TOPIC>'. "
    "Memorize each <TOPIC>. At the end of the record, I will ask you to retrieve the first topic name. Now the "
    "record start. USER: I would like to discuss the topic of the psychology of creativity. \n ASSISTANT: Sure! "
    "\n USER: Great, this is the end of our discussion on the psychology of creativity. Let's talk about the next "
    "topic.USER: I would like to discuss the topic of the benefits of volunteering. \n ASSISTANT: Sure! Now the "
    "record ends. What is the first topic we discussed? Only give me the topic name. Do not summarize yourself."
)


def _released(folder, task: str, n: int, cases: list[dict]):
    """A released test-case file in LongEval's layout: ``<folder>/<task>/testcases/<n>_<task>.jsonl``."""
    path = folder / task / "testcases" / f"{n}_{task}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


def _lines_cases() -> list[dict]:
    return [{"random_idx": ["torpid-kid", 0], "expected_number": 2416, "num_lines": 2, "token_size": 120,
             "correct_line": "line torpid-kid: REGISTER_CONTENT is <2416>\n", "prompt": LINES_CASE_PROMPT},
            {"random_idx": ["oval-underpants", 1], "expected_number": 33851, "num_lines": 2, "token_size": 120,
             "correct_line": "line oval-underpants: REGISTER_CONTENT is <33851>\n",
             "prompt": LINES_CASE_PROMPT.replace("line torpid-kid?", "line oval-underpants?")}]


def test_lines_released_cases_are_evaluated_byte_for_byte_and_scored_as_eval_py(tmp_path, byt5):
    from lengthx.tasks.lines import LinesTask

    path = _released(tmp_path / "evaluation", "lines", 2, _lines_cases())
    task = LinesTask(testcases_dir=str(tmp_path / "evaluation"), seed=0)
    setting = Setting("2", 2, "lines")
    cases = task.examples(setting, byt5, 2, seed=0)
    assert [e.prompt for e in cases] == [LINES_CASE_PROMPT, _lines_cases()[1]["prompt"]]
    assert cases[0].prompt.endswith("I need the number. ")  # the trailing space of every released prompt
    assert [e.target for e in cases] == [2416, 33851]
    assert cases[0].meta["testcase"] == "2_lines.jsonl:1" and cases[1].meta["query_idx"] == "oval-underpants"
    assert cases[0].actual_tokens == len(byt5(LINES_CASE_PROMPT)["input_ids"])
    # eval.py: the last integer of the output is compared with expected_number
    assert task.score("line torpid-kid has 2416.", cases[0]) == {"accuracy": 100.0}
    assert task.score("2416, no: 2417", cases[0]) == {"accuracy": 0.0}
    assert task.data_source(setting).startswith("2_lines.jsonl@")
    # any other seed (Algorithm 1's calibration records) draws generated records with the current wording
    (generated,) = task.examples(setting, byt5, 1, seed=100003)
    assert generated.prompt.endswith("I need the number.") and "testcase" not in generated.meta
    with pytest.raises(ValueError, match="holds 2 test cases"):
        task.examples(setting, byt5, 3, seed=0)
    assert path.is_file()


def test_topics_released_cases_are_evaluated_byte_for_byte(tmp_path, byt5):
    from lengthx.tasks.topics import TopicsTask

    case = {"test_id": 0, "prompt": TOPICS_CASE_PROMPT, "prompt_length": -1,
            "topics": ["The psychology of creativity", "The benefits of volunteering"]}
    _released(tmp_path, "topics", 2, [case])
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "2_topics.jsonl").write_text(json.dumps(case) + "\n")  # the testcases folder itself
    for folder in (tmp_path, flat):
        task = TopicsTask(testcases_dir=str(folder), seed=0)
        (ex,) = task.examples(Setting("2", 2, "topics"), byt5, 1, seed=0)
        assert ex.prompt == TOPICS_CASE_PROMPT and ex.target == "The psychology of creativity"
        assert ex.meta["topics"] == case["topics"] and ex.meta["testcase"] == "2_topics.jsonl:1"
        assert task.score("The first topic is the psychology of creativity.", ex) == {"accuracy": 100.0}
        assert task.score("The benefits of volunteering.", ex) == {"accuracy": 0.0}
        assert task.data_source(Setting("2", 2, "topics")).startswith("2_topics.jsonl@")


def test_testcases_dir_problems_name_the_file_and_the_fix(tmp_path):
    from omegaconf import OmegaConf

    from lengthx.tasks.lines import LinesTask
    from lengthx.tasks.topics import TopicsTask

    _released(tmp_path, "lines", 200, [{**case, "num_lines": 200} for case in _lines_cases()])  # a file's count
    cfg = OmegaConf.create({"testcases_dir": str(tmp_path)})
    paper = [Setting("200", 200, "lines"), Setting("300", 300, "lines")]
    problem = LinesTask.data_problem(cfg, "paper", paper)
    assert "300_lines.jsonl" in problem and "Fix:" in problem
    assert LinesTask.data_problem(cfg, "paper", paper[:1]) is None
    assert "tokens" in LinesTask.data_problem(cfg, "mini", [Setting("200", 2200, "tokens")])
    missing = OmegaConf.create({"testcases_dir": str(tmp_path / "nope"), "conversations_path": None})
    assert "no such directory" in TopicsTask.data_problem(missing, "paper", [Setting("5", 5, "topics")])
    bad = tmp_path / "topics" / "testcases" / "5_topics.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps({"prompt": "x", "topics": "not a list"}) + "\n")
    from lengthx.data.jsonl import DataFormatError

    with pytest.raises(DataFormatError, match="5_topics.jsonl, line 1: field 'topics'"):
        TopicsTask(testcases_dir=str(tmp_path)).examples(Setting("5", 5, "topics"), None, 1, seed=0)


# ---- carrying committed cells to a new scoring rule (lengthx.cli.rescore) ------------------------------------


def test_rescore_carries_cells_to_the_new_rule_without_generating(tiny_model_dir, tmp_path):
    """Cells computed under an older scoring version take the new hash and the scores of their stored outputs; a
    run of the current config then finds them done (no row, no record is added)."""
    from lengthx.cli.rescore import RESCORED, rescore
    from lengthx.core.runner import Runner
    from lengthx.core.store import ResultsStore
    from lengthx.models.minis import compose_run

    res = tmp_path / "res"
    job = ["task=code_completion", "method=none", f"model.path={tiny_model_dir}", "model.l_tr=64",
           "task.num_examples=2", "task.settings=[48]", "task.max_new_tokens=6", "device=cpu"]
    old = Runner(compose_run([*job, f"results_dir={res}", "task.scoring_version=1"]))
    old.run()
    store = ResultsStore(res)
    (key,) = {c.key for c, _ in old.cells()}
    path = store.records_path(key)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:  # scores the older rule gave: not what the current rule gives these outputs
        r["scores"] = {"exact_match": 100.0, "edit_similarity": 55.5}
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    counts = rescore(res, "code_completion", ["task.scoring_version=1"], ["run " + " ".join(job)])
    assert counts.rescored_cells == 1 and counts.rows == 3 and counts.records == 2 and not counts.left
    new = Runner(compose_run([*job, f"results_dir={res}"]))
    ((cell, chash),) = new.cells()
    assert store.is_done(cell.key, chash, new.cell_metrics)
    rescored = list(store.load_records(cell.key).values())
    task = CodeCompletionTask()
    expected = [task.score(r["output"], Example(r["id"], "", r["target"], None, 0)) for r in rescored]
    assert [r["scores"] for r in rescored] == expected and {r["config_hash"] for r in rescored} == {chash}
    rows = store.read()
    em = rows[rows["metric"] == "edit_similarity"]
    assert list(em["value"]) == [round(sum(e["edit_similarity"] for e in expected) / 2, 4)]
    assert set(rows["message"]) == {RESCORED} and set(rows["config_hash"]) == {chash}
    before = path.read_bytes()
    new.run()
    assert len(store.read()) == len(rows) and path.read_bytes() == before  # nothing recomputed


def test_an_unset_testcases_dir_leaves_every_cell_hash_as_it_was(tmp_path):
    """The key arrived after cells were computed: null (what they ran) stays out of the hash, a folder enters it."""
    from omegaconf import open_dict

    from lengthx.core.cells import cell_hash, planned_cells
    from lengthx.models.minis import compose_run

    for task in ("topics", "lines"):
        cfg = compose_run([f"task={task}", f"results_dir={tmp_path}"])
        (setting, *_) = [c.setting for c in planned_cells(cfg)]
        unset = cell_hash(cfg, setting, "w")
        with open_dict(cfg):
            del cfg.task["testcases_dir"]
        assert cell_hash(cfg, setting, "w") == unset
        with open_dict(cfg):
            cfg.task.testcases_dir = str(tmp_path)
        assert cell_hash(cfg, setting, "w") != unset
