"""Paper A's tasks beyond passkey: reference formats (docs/design.md §6, §10), scorers, edit similarity,
token-exact lengths in the mini profile, LM likelihood, truncation and the table specs (the data files' readers:
tests/test_tasks_a_data.py)."""

from __future__ import annotations

import csv
import math
import random
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from lengthx.data.corpora import stdlib_sources
from lengthx.data.fitting import count_tokens, truncate_prompt
from lengthx.tasks import TASKS, build_task, resolve_settings
from lengthx.tasks.base import Setting, truncated_example
from lengthx.tasks.code_completion import CodeCompletionTask
from lengthx.tasks.code_key import CodeKeyTask, code_points
from lengthx.tasks.lines import LinesTask
from lengthx.tasks.lm import LMTask
from lengthx.tasks.mdqa import MDQATask, mdqa_prompt
from lengthx.tasks.metrics import (
    best_subspan_em,
    code_exact_match,
    code_key_correct,
    code_tokens,
    edit_similarity,
    first_line,
    lines_correct,
    topic_correct,
)
from lengthx.tasks.topics import TopicsTask

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "lengthx" / "conf" / "task"
MINI_TOKENIZER = ROOT / "lengthx" / "checkpoints" / "mini-t5"
PAPER_TABLES = ROOT / "lengthx" / "published" / "attention-alignment-tables"
NEW_TASKS = ("lines", "topics", "mdqa", "code_completion", "code_key", "lm")


@pytest.fixture(scope="module")
def mini_tok(byt5):
    """The mini profile's tokenizer (the shipped mini-t5's), else ByT5."""
    if (MINI_TOKENIZER / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(MINI_TOKENIZER))
    return byt5


# ---- reference formats (docs/design.md §6, §10) --------------------------------------------------------------

LINES_HEADER = (
    "Below is a record of lines I want you to remember. Each line begins with 'line <line index>' and contains "
    "a '<REGISTER_CONTENT>' at the end of the line as a numerical value. For each line index, memorize its "
    "corresponding <REGISTER_CONTENT>. At the end of the record, I will ask you to retrieve the corresponding "
    "<REGISTER_CONTENT> of a certain line index. Now the record start:\n\n"
)


def test_lines_prompt_is_the_reference(byt5):
    (ex,) = LinesTask().examples(Setting("5", 5, "lines"), byt5, 1, seed=3)
    assert ex.prompt.startswith(LINES_HEADER)
    body, question = ex.prompt[len(LINES_HEADER):].split("\nNow the record is over.")
    lines = body.split("\n")
    assert lines[-1] == "" and len(lines) == 6
    pairs = [re.fullmatch(r"line (\S+-\S+): REGISTER_CONTENT is <(\d+)>", ln) for ln in lines[:-1]]
    assert all(pairs)
    idx = ex.meta["query_idx"]
    assert question == f" Tell me what is the <REGISTER_CONTENT> in line {idx}? I need the number."
    assert {m.group(1): int(m.group(2)) for m in pairs}[idx] == ex.target
    assert ex.requested_tokens is None and ex.actual_tokens == count_tokens(byt5, ex.prompt)


TOPICS_HEADER = (
    "Below is a record of our previous conversation on {n} different topics. You are the ASSISTANT, and I am "
    "the USER. At the beginning of each topic, the USER will say 'I would like to discuss the topic of "
    "<TOPIC>'. Memorize each <TOPIC>. At the end of the record, I will ask you to retrieve the first topic. "
    "Now the record start. "
)
TOPICS_QUESTION = (" Now the record ends. What is the first topic(s) we discussed? Only give me the topic name. "
                   "Do not summarize yourself.")


def test_topics_prompt_is_the_reference(byt5):
    (ex,) = TopicsTask().examples(Setting("5", 5, "topics"), byt5, 1, seed=0)
    assert ex.prompt.startswith(TOPICS_HEADER.format(n=5)) and ex.prompt.endswith(TOPICS_QUESTION)
    topics = ex.meta["topics"]
    assert len(set(topics)) == 5 and ex.target == topics[0]  # drawn without replacement; first is the answer
    record = ex.prompt[len(TOPICS_HEADER.format(n=5)):-len(TOPICS_QUESTION)]
    openers = [m.start() for m in re.finditer(r"USER: I would like to discuss the topic of ", record)]
    assert openers[0] == 0 and len(openers) == 5
    for start, topic in zip(openers, topics, strict=True):
        assert record[start:].startswith(f"USER: I would like to discuss the topic of {topic}.")
    # the generated conversations are varied: no two share their text after the opener
    texts = [record[a:b] for a, b in zip(openers, openers[1:] + [len(record)], strict=True)]
    assert len({t.split(".", 1)[1] for t in texts}) == 5


def test_mdqa_prompt_is_the_reference(byt5):
    task = MDQATask()
    (ex,) = task.examples(Setting("10docs@4", 10, "docs"), byt5, 1, seed=0)
    head = ("Write a high-quality answer for the given question using only the provided search results "
            "(some of which might be irrelevant).\n\n")
    assert ex.prompt.startswith(head)
    docs, tail = ex.prompt[len(head):].split("\n\nQuestion: ")
    assert tail == f"{ex.meta['question']}\nAnswer:"
    lines = docs.split("\n")
    assert [re.match(r"Document \[(\d+)\]\(Title: ", ln).group(1) for ln in lines] == [str(i) for i in range(1, 11)]
    # the gold document (position 4, i.e. "Document [5]") holds the answer; the distractors do not
    assert best_subspan_em(lines[4], ex.target) == 1.0
    assert sum(best_subspan_em(ln, ex.target) for ln in lines) == 1.0
    assert mdqa_prompt("q", []) == head + "\n\nQuestion: q\nAnswer:"


def test_code_completion_example_is_lcc_like(byt5):
    (ex,) = CodeCompletionTask().examples(Setting("1k", 300, "tokens"), byt5, 1, seed=0)
    assert ex.prompt.endswith("\n") and "\n\n" not in ex.prompt  # newline runs collapsed
    path, line = ex.meta["source"].removeprefix("stdlib/").rsplit(":", 1)
    text = dict(stdlib_sources())[path]
    kept = [ln for ln in text.split("\n") if ln.strip()]
    assert ex.target == kept[int(line) - 1].strip() and ex.target  # the next non-blank line of the file
    assert "\n".join(kept).find(ex.prompt + kept[int(line) - 1]) >= 0  # context = the code just before it


def test_code_key_prompt_ends_with_the_question(byt5):
    (ex,) = CodeKeyTask().examples(Setting("16k", 1200, "tokens"), byt5, 1, seed=0)
    assert ex.prompt.endswith("\nassert special_function() == ")
    assert ex.prompt.count("def special_function() -> int:\n") == 1
    assert f'    """Only returns an integer."""\n    return {ex.target}\n' in ex.prompt
    assert 1 <= ex.target <= 100 and "# file: " in ex.prompt


def test_code_points_close_open_strings_and_brackets():
    code = 'x = 1\ndef f():\n    """doc\n    more"""\n    return g(1,\n             2)\n@dec\ndef h():\n    pass\n'
    cuts, anchors = code_points(code)
    by_end = dict(cuts)
    assert by_end[len("x = 1\n")] == ""
    inside_doc = code.index("    more")
    assert by_end[inside_doc] == '"""\n'  # inside the docstring: closed by its quotes
    assert by_end[code.index("             2)")] == ")\n"  # inside a call: closed by its bracket
    assert code.index('    """doc') not in by_end  # never right after a block header (it needs a body)
    assert code.index("def f") in anchors and code.index("@dec") in anchors
    assert code.index("def h") not in anchors  # not between a decorator and its function


def test_lm_example_is_a_split_document(byt5):
    task = LMTask(continuation_tokens=32)
    ex = task.examples(Setting("1024", 400, "tokens"), byt5, 2, seed=0)
    docs = dict(task.documents())
    for e in ex:
        text = docs[e.meta["document"]]
        split = e.meta["split_char"]
        assert text[:split].endswith(e.prompt) and text[split:].startswith(e.target)
        assert e.actual_tokens == 400 and e.meta["continuation_tokens"] == 32


@pytest.mark.parametrize("name", ["lm", "code_completion"])
def test_mini_profile_scores_the_same_text_at_every_length(name, mini_tok):
    """profile=mini: example i is one split point at every length; only the context before it grows."""
    from lengthx.data.splits import is_test_document
    from lengthx.models.minis import compose

    cfg = compose([f"task={name}", "profile=mini"]).task
    assert cfg.same_text is True and cfg.stdlib_split == "test"
    task = build_task(cfg, "mini", l_tr=128)
    settings = resolve_settings(cfg, "mini", 128)
    assert task.longest == max(s.value for s in settings)  # the sweep's longest context, whatever task.only says
    short, long = settings[0], settings[-1]
    a, b = task.examples(short, mini_tok, 4, seed=0), task.examples(long, mini_tok, 4, seed=0)
    for x, y in zip(a, b, strict=True):
        assert x.target == y.target  # the same continuation / next line
        assert y.prompt.endswith(x.prompt) and len(y.prompt) > len(x.prompt)  # more context before it, nothing else
        assert abs(x.actual_tokens - short.value) <= 2 and abs(y.actual_tokens - long.value) <= 2
        source = x.meta.get("document") or x.meta["source"].removeprefix("stdlib/").rsplit(":", 1)[0]
        assert is_test_document(source)  # held-out files only
    narrowed = build_task(compose([f"task={name}", f"task.only=[{short.label}]"]).task, "mini", l_tr=128)
    assert [e.prompt for e in narrowed.examples(short, mini_tok, 4, seed=0)] == [e.prompt for e in a]
    paper = build_task(compose([f"task={name}", "profile=paper"]).task, "paper", l_tr=128)
    assert paper.same_text is False  # the paper profile keeps the papers' protocol


# ---- scorers on hand-made outputs ---------------------------------------------------------------------


def test_lines_scorer_takes_the_last_integer():
    assert lines_correct("The <REGISTER_CONTENT> in line swift-river is <31415>.", 31415)
    assert lines_correct("line 2 of 3: 31415", 31415)  # extra numbers before: the last one counts
    assert not lines_correct("31415, or maybe 27", 31415)
    assert not lines_correct("no number", 31415)
    assert LinesTask().score("is <42>", type("E", (), {"target": 42})())["accuracy"] == 100.0


def test_topic_scorer_is_normalized_containment():
    assert topic_correct("The first topic was: The History of Jazz!", "the history of jazz")
    assert topic_correct("history of jazz", "The history of jazz.")
    assert topic_correct("We talked about baking sourdough bread, then tea.", "baking sourdough bread")
    assert not topic_correct("party planning", "art")  # whole words only
    assert not topic_correct("the history of the bicycle", "the history of jazz")
    assert not topic_correct("", "jazz")


def test_best_subspan_em_is_lost_in_the_middle():
    assert best_subspan_em("The Eiffel Tower.", ["Eiffel Tower"]) == 1.0  # article and punctuation dropped
    assert best_subspan_em("it was built by gustave eiffel's company", ["Gustave Eiffel's"]) == 1.0
    assert best_subspan_em("Paris\nThe answer is London", ["London"]) == 0.0  # cut at the first newline
    assert best_subspan_em("In 1889, it opened", ["1889", "eighteen eighty-nine"]) == 1.0
    assert best_subspan_em("an apple", ["the apple", "pear"]) == 1.0
    assert best_subspan_em("nothing", ["London"]) == 0.0
    assert MDQATask().score("Blue Kite Day.", type("E", (), {"target": ["Blue Kite Day"]})())["accuracy"] == 100


def test_code_scorers_use_the_first_line():
    task = CodeCompletionTask()
    ex = type("E", (), {"target": "    return self._name_"})()
    assert first_line("  return self._name_\n    x = 1\n") == "  return self._name_"
    assert task.score("  return self._name_\n    x = 1\n", ex) == {"exact_match": 100.0, "edit_similarity": 100.0}
    assert code_exact_match("return  self._name_", "return self._name_")
    assert not code_exact_match("return self._name", "return self._name_")
    sc = task.score("return self._name\nreturn self._name_", ex)
    # code tokens "return self . _name" (19 characters) vs "return self . _name_" (20): one insertion, 38/39
    assert sc["exact_match"] == 0.0 and sc["edit_similarity"] == 97.0
    assert edit_similarity("", "") == 100.0 and edit_similarity("", "abc") == 0.0
    assert code_key_correct(" 42)\nassert x == 7", 42) and not code_key_correct("7 or 42", 42)


def _indel_ratio(a: str, b: str) -> int:
    """Reference: fuzzywuzzy's ``fuzz.ratio`` with python-Levenshtein, the Indel distance by dynamic programming
    (insert/delete only): 100 for equal strings, 0 when one is empty, else round(100 · (T − d) / T)."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = prev[j - 1] if a[i - 1] == b[j - 1] else 1 + min(prev[j], cur[j - 1])
        prev = cur
    total = len(a) + len(b)
    return int(round(100 * ((total - prev[-1]) / total)))


def test_edit_similarity_matches_fuzz_ratio():
    rng = random.Random(0)
    alphabet = "ab(c) =_.x\t'"
    for _ in range(200):
        a = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        b = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        joined = " ".join(code_tokens(a)), " ".join(code_tokens(b))
        assert edit_similarity(a, b) == _indel_ratio(*joined)


def test_code_lines_are_compared_as_tree_sitter_tokens_as_lcc_is_evaluated():
    """LongCoder's LCC evaluation tokenises both lines with tree-sitter: spacing never decides a match."""
    assert code_tokens("self.assertEqual(a,b)") == ["self", ".", "assertEqual", "(", "a", ",", "b", ")"]
    assert code_exact_match("f(a,b)", "f(a, b)") and code_exact_match("x=[1,2]", "x = [ 1 , 2 ]")
    assert edit_similarity("f(a,b)", "f(a, b)") == 100.0
    assert not code_exact_match("f(a,b)", "f(a, c)")
    assert code_tokens("else:") == ["else", ":"]  # a lone line parses with error nodes; its leaves still count
    assert code_tokens('s = "two words"  # note') == ["s", "=", '"two words"', "# note"]
    # a no-break space is a leaf of its own (upstream has no fallback to whitespace tokens)
    assert code_tokens("f(a,\u00a0b)") == ["f", "(", "a", ",", "\u00a0", "b", ")"]


def test_code_completion_log_tau_uses_the_bucket_lower_bound_as_table_11():
    """Paper A Table 11's log row is log 768 / log(n·1000), the bucket's lower bound, in every column."""
    from lengthx.alignment.propositions import log_temperature
    from lengthx.core.cells import Cell
    from lengthx.core.runner import Runner
    from lengthx.models.minis import compose

    cfg = compose(["profile=paper", "model=codet5p-770m-py", "task=code_completion", "method=log"])
    assert cfg.task.log_l_ex == "setting"
    runner = Runner(cfg, loaded=type("Loaded", (), {"l_tr": 768})())
    setting = resolve_settings(cfg.task, "paper", 768)[0]
    examples = [type("E", (), {"actual_tokens": n})() for n in (1200, 1700)]  # measured lengths in the bucket
    tau = runner.temperature(Cell("codet5p-770m-py", "log", "code_completion", setting), examples)
    assert tau == pytest.approx(math.log(768) / math.log(1000)) and round(tau, 2) == 0.96
    assert tau != pytest.approx(log_temperature(1450, 768))


# ---- token-exact lengths in the mini profile ----------------------------------------------------------


@pytest.mark.parametrize("name", NEW_TASKS)
def test_mini_lengths_within_two_percent(name, mini_tok):
    cfg = OmegaConf.load(CONF / f"{name}.yaml")
    settings = resolve_settings(cfg, "mini", 256)
    assert [s.label for s in settings] == list(cfg.labels) and all(s.unit == "tokens" for s in settings)
    task = TASKS[name]()
    for setting in (settings[0], settings[-1]):
        examples = task.examples(setting, mini_tok, 2, seed=0)
        for ex in examples:
            assert ex.requested_tokens == setting.value
            assert ex.actual_tokens == count_tokens(mini_tok, ex.prompt)
            assert abs(ex.actual_tokens - setting.value) <= 0.02 * setting.value, (name, setting, ex.actual_tokens)


@pytest.mark.parametrize("name", NEW_TASKS)
def test_examples_are_seeded(name, byt5):
    task = TASKS[name]()
    setting = Setting("10docs@4" if name == "mdqa" else "x", 1500, "tokens")
    a = task.examples(setting, byt5, 2, seed=5)
    assert [e.prompt for e in a] == [e.prompt for e in TASKS[name]().examples(setting, byt5, 2, seed=5)]
    assert [e.prompt for e in a] != [e.prompt for e in task.examples(setting, byt5, 2, seed=6)]


def test_algorithm1_reference_setting_works_for_every_task(mini_tok):
    """Algorithm 1 asks each task for examples at Setting("L_tr", l_tr, "tokens")."""
    for name in NEW_TASKS:
        ex = TASKS[name]().examples(Setting("L_tr", 512, "tokens"), mini_tok, 1, seed=0)
        assert abs(ex[0].actual_tokens - 512) <= 0.05 * 512, name


# ---- truncation baseline and LM likelihood -------------------------------------------------------------


def test_truncate_prompt_keeps_the_last_l_tr_tokens(byt5):
    (ex,) = CodeCompletionTask().examples(Setting("1k", 600, "tokens"), byt5, 1, seed=2)
    short = truncate_prompt(byt5, ex.prompt, 200)
    assert ex.prompt.endswith(short) and count_tokens(byt5, short) == 200
    assert truncate_prompt(byt5, short, 300) == short
    t = truncated_example(ex, byt5, 200)
    assert t.prompt == short and t.actual_tokens == 200 and t.meta["untruncated_tokens"] == 600
    assert t.target == ex.target and t.id == ex.id


def test_lm_evaluate_matches_the_model_loss(byt5):
    from conftest import loaded_model, tiny_byte_t5

    model = tiny_byte_t5()
    loaded = loaded_model(model, "t5", 64, byt5)
    task = LMTask(continuation_tokens=16)
    ex = task.examples(Setting("120", 120, "tokens"), byt5, 3, seed=0)
    scores = task.evaluate(loaded, ex, batch_size=2)  # padded batch of 2 + a batch of 1
    assert len(scores) == 3
    for e, s in zip(ex, scores, strict=True):
        enc = byt5(e.prompt, return_tensors="pt")
        labels = byt5(e.target, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            loss = model(**enc, labels=labels).loss.item()
        assert s["nll"] == pytest.approx(loss, rel=1e-4) and s["perplexity"] == pytest.approx(math.exp(loss), rel=1e-4)
        assert s["tokens"] == 16
    with pytest.raises(TypeError, match="likelihood"):
        task.score("", ex[0])


# ---- registry, configs, table specs ------------------------------------------------------------------


def test_registry_and_configs():
    for name in NEW_TASKS:
        cfg = OmegaConf.load(CONF / f"{name}.yaml")
        assert cfg.name == name and name in TASKS
        task = build_task(cfg)
        assert task.name == name and task.max_new_tokens == int(cfg.max_new_tokens)
        assert len(cfg.labels) == len(cfg.paper_settings) == len(cfg.paper_l_ex)
        if hasattr(TASKS[name], "from_config"):
            assert TASKS[name].from_config(cfg, profile="mini").name == name
    assert OmegaConf.load(CONF / "mdqa.yaml").paper_l_ex[-1] == 5000
    assert list(OmegaConf.load(CONF / "lm.yaml").paper_l_ex) == [1024, 2048, 4096, 8192, 15000]


def test_table_specs_match_the_published_layouts():
    from lengthx.report.tables.paper_a import PAPER_A_SPECS
    from lengthx.report.tables.render import render

    by_id = {s.id: s for s in PAPER_A_SPECS}
    assert {"aa_table3", "aa_table4", "aa_table5", "aa_table6_em", "aa_table6_es", "aa_table12", "aa_table13",
            "aa_table14"} <= set(by_id)
    for spec in PAPER_A_SPECS:
        if spec.paper_csv:
            rows = list(csv.reader(open(PAPER_TABLES / Path(spec.paper_csv).name, encoding="utf-8")))
            # our columns are the paper's, in order (Table 10: several of ours per published column)
            width = len({spec.paper_column(j) for j in range(len(spec.columns))}) + int(spec.avg)
            assert width == len(rows[spec.paper_header_rows]) - 1, spec.id
            headers = rows[spec.paper_header_rows - 1][1:]
            ours = [c.title for c in spec.columns] + (["Avg."] if spec.avg else [])
            if spec.paper_columns is not None:
                assert all(headers[spec.paper_column(j)].startswith(c.group)
                           for j, c in enumerate(spec.columns)), spec.id
            elif spec.rows is None:  # Tables 1/7 head their columns "L_tr"/longest, not the paper's 512/15k
                assert all(p.startswith(o) for o, p in zip(ours, headers[:width], strict=True)), spec.id
        for c in spec.columns:  # every column names a configured task and one of its labels
            labels = [*OmegaConf.load(CONF / f"{c.task}.yaml").labels, "L_tr"]  # L_tr: the reference length
            assert c.setting in labels or getattr(c, "average_of", ()), (spec.id, c)
            assert all(s in labels for s in getattr(c, "average_of", ()))
    df = pd.DataFrame([{"model": "m", "method": "none", "task": "mdqa", "setting": "10docs@0", "metric": "accuracy",
                        "value": 50.0, "status": "ok", "timestamp": "t"}])
    out = render(by_id["aa_table14"], df)  # the current renderer accepts the extended specs
    assert "50.0" in out.markdown


def test_mini_topics_records_hold_several_conversations_at_every_mini_setting(mini_tok):
    """Every mini topics setting (paper lengths scaled to L_tr 256) makes the model choose the first topic among
    several conversations, all distinct, as the benchmark's 5-25 topics do."""
    cfg = OmegaConf.load(CONF / "topics.yaml")
    task = TopicsTask()
    for setting in resolve_settings(cfg, "mini", 256):
        for ex in task.examples(setting, mini_tok, 4, seed=3):
            assert ex.meta["n_topics"] >= 10, (setting, ex.meta["n_topics"])
            assert len(set(ex.meta["topics"])) == len(ex.meta["topics"])
            assert ex.target == ex.meta["topics"][0]


def test_topics_calibration_never_asks_an_evaluation_topic(mini_tok):
    """Calibration records (task.calibration_item) open with a conversation no evaluation record opens with,
    whatever the two seeds, even the same seed."""
    task = TopicsTask()
    setting = Setting("1024", 1024, "tokens")
    evaluation = task.examples(setting, mini_tok, 6, seed=1)
    used = {e.meta[task.calibration_item] for e in evaluation}
    for seed in (1, 100004):
        calibration = task.examples(setting, mini_tok, 6, seed=seed, exclude=used)
        assert len(calibration) == 6
        assert not {e.meta["first"] for e in calibration} & used
        assert not {e.target for e in calibration} & {e.target for e in evaluation}
    everything = set(range(len(task.conversations())))
    assert task.examples(setting, mini_tok, 2, seed=1, exclude=everything) == []

