"""Topics with count and length as separate knobs (``task.num_topics``, lengthx.tasks.topics_records), the
mini stand-in's short format, and the stand-in's training records (docs/mini-t5-study.md)."""

from __future__ import annotations

import random
import re

import pytest
from conftest import refused_before_work
from transformers import AutoTokenizer

from lengthx import mini_path
from lengthx.cli import main
from lengthx.tasks.base import Setting
from lengthx.tasks.topics import HEADER, SHORT_HEADER, TopicsTask, topics_prompt

OPENING = re.compile(r"USER: I would like to discuss the topic of ")


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(mini_path("mini-t5"))


def _topics_in(prompt: str) -> int:
    return len(OPENING.findall(prompt))


@pytest.mark.parametrize("k", [1, 3, 5])
def test_fixed_count_records_hold_k_conversations_at_about_l_tokens(tok, k):
    """Exactly K opening sentences at every length, N = K in the header, at most L tokens and within one turn of
    it, and example i asks for the same first topic at every K and L (the matched comparison is paired)."""
    firsts = {}
    for fmt in ("short", "longeval"):
        task = TopicsTask(prompt_format=fmt, num_topics=k)
        for length in (480, 1024, 2560):
            examples = task.examples(Setting(f"{length}", length, "tokens"), tok, 4, seed=3)
            for e in examples:
                assert _topics_in(e.prompt) == k, e.prompt
                assert f"on {k} different topics" in e.prompt
                assert e.prompt.startswith((SHORT_HEADER if fmt == "short" else HEADER).split("{n}")[0])
                assert length - 40 <= e.actual_tokens <= length, (length, e.actual_tokens)
                assert e.meta["n_topics"] == k and len(e.meta["turns"]) == k
                firsts.setdefault(e.id, set()).add(e.target)
    baseline = [TopicsTask(num_topics=1).examples(Setting("400", 400, "tokens"), tok, 4, seed=3)[i].target
                for i in range(4)]
    assert [firsts[f"3-{i}"] for i in range(4)] == [{t} for t in baseline]


def test_records_grow_by_turns_of_their_own_subject(tok):
    """A long record of one conversation repeats its topic only once (the opening) and adds exchanges about its
    subject; conversations grow together, one turn each in turn."""
    (e,) = TopicsTask(num_topics=1, prompt_format="short").examples(Setting("1500", 1500, "tokens"), tok, 1, seed=0)
    assert e.meta["turns"][0] > 20 and e.prompt.count(e.target) == 1
    (e3,) = TopicsTask(num_topics=3, prompt_format="short").examples(Setting("1500", 1500, "tokens"), tok, 1, seed=0)
    assert max(e3.meta["turns"]) - min(e3.meta["turns"]) <= 1


def test_short_format_is_the_benchmark_question_without_the_instructions():
    short = topics_prompt(["USER: a."], fmt="short")
    full = topics_prompt(["USER: a."])
    assert short.startswith("Below is a record of our previous conversation on 1 different topics. Now the record start.")
    assert "Memorize each <TOPIC>" in full and "Memorize" not in short
    assert short.endswith("What is the first topic(s) we discussed? Only give me the topic name.")
    assert len(short) < len(full) / 2


def test_without_a_count_records_are_as_the_benchmark_builds_them(tok):
    """No task.num_topics: the count grows with the length (the behaviour every earlier cell ran)."""
    task = TopicsTask(prompt_format="short")
    short, long = (task.examples(Setting(str(n), n, "tokens"), tok, 3, seed=0) for n in (256, 2048))
    assert max(_topics_in(e.prompt) for e in short) < min(_topics_in(e.prompt) for e in long)
    assert "turns" not in short[0].meta


def test_training_records_cover_one_to_k_max_conversations(tok):
    task = TopicsTask(prompt_format="short")
    rng, counts, seen = random.Random(0), set(), 0
    while seen < 120:
        try:
            prompt, topic, k = task.training_record(tok, 256, 6, rng)
        except ValueError:  # six long opening sentences can exceed L_tr: drawn again
            continue
        seen += 1
        counts.add(k)
        assert len(tok(prompt)["input_ids"]) <= 256
        assert prompt.index(topic) < prompt.index("ASSISTANT") if "ASSISTANT" in prompt else topic in prompt
    assert counts >= {1, 2, 3, 4, 5, 6}


@pytest.mark.parametrize("args, expected", [
    (["task.num_topics=6", "task.settings=[256]", "task.unit=tokens"], "draws 6 conversations that need"),
    (["task.num_topics=3"], "task.unit=topics settings"),
    (["task.num_topics=3", "task.unit=tokens"], "needs explicit lengths"),
    (["task.num_topics=0", "task.settings=[256]", "task.unit=tokens"], "not a count of conversations"),
    (["task.num_topics=5000", "task.settings=[99999]", "task.unit=tokens"], "only 1200 conversations"),
    (["task.format=medium"], "no such topics format"),
    (["profile=paper", "model=flan-t5-xl", "task.format=short", "task.conversations_path=README.md"],
     "profile=paper keeps LongEval's prompt"),
])
def test_counts_that_cannot_run_stop_before_work(args, expected, capsys, tmp_path):
    assert expected in refused_before_work(["run", "task=topics", f"results_dir={tmp_path}", *args], capsys, tmp_path)


def test_the_mini_profile_runs_the_stand_in_in_the_format_it_was_trained_in():
    """profile=mini maps Flan-T5 onto mini-t5, whose config names its topics format: the task follows it; a paper
    model's own run (profile=paper) and a stand-in without one keep LongEval's prompt."""
    from lengthx.models.minis import compose_run

    assert compose_run(["model=flan-t5-large", "task=topics"]).task.format == "short"
    assert compose_run(["model=mini-t5", "task=topics"]).task.format == "short"
    assert compose_run(["model=t5-xl-lm", "task=topics"]).task.format is None
    assert compose_run(["model=flan-t5-large", "task=topics", "task.format=longeval"]).task.format == "longeval"


def test_a_count_whose_worst_draw_overflows_runs_when_the_runs_own_draws_fit(capsys, tmp_path):
    """K = 5 at L_tr = 256: the five longest opening sentences need more than 256 tokens, but the records of the
    run's seed and examples fit, so the run goes ahead; a length that one of its records cannot fit stops it,
    naming the example."""
    from lengthx.models.loading import load_tokenizer
    from lengthx.models.minis import compose_run
    from lengthx.tasks import build_task

    cfg = compose_run(["model=mini-t5", "task=topics", "task.num_topics=5"])
    task, tok = build_task(cfg.task, "mini"), load_tokenizer(cfg.model)
    assert "need up to" in task.count_problem_at(tok, 256)  # the worst draw does not fit
    assert task.count_problem_at(tok, 256, (0, 60)) is None
    main(["run", "model=mini-t5", "task=topics", "task.num_topics=5", "task.settings=[256]", "task.unit=tokens",
          "task.num_examples=60", f"results_dir={tmp_path}", "--dry-run"])
    assert "256tokens-5topics" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["run", "model=mini-t5", "task=topics", "task.num_topics=5", "task.settings=[200]", "task.unit=tokens",
              "task.num_examples=60", f"results_dir={tmp_path}"])
    assert exc.value.code == 2 and "example 0 of task.seed=0" in capsys.readouterr().err
