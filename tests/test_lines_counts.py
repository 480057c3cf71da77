"""Lines with count and length as separate knobs (``task.num_lines``, lengthx.tasks.lines_records) and the lookup
stand-in's short format through ``task.format`` (docs/usage.md)."""

from __future__ import annotations

import re

import pytest
from conftest import refused_before_work
from transformers import AutoTokenizer

from lengthx import mini_path
from lengthx.cli import main
from lengthx.core.cells import config_hash
from lengthx.models.minis import compose_run
from lengthx.tasks.base import Setting, resolve_settings
from lengthx.tasks.lines import (
    HEADER,
    SHORT_HEADER,
    LinesCase,
    LinesTask,
    case_seed,
    draw_seed,
    filled_prompt,
    lines_case_at,
    lines_prompt,
)
from lengthx.tasks.lines_records import SENTENCES, depths

LINE = re.compile(r"^line (\S+): REGISTER_CONTENT is <(\d+)>$", re.M)


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(mini_path("mini-t5"))


def _tokens(tok, text: str) -> int:
    return len(tok(text)["input_ids"])


@pytest.mark.parametrize("k", [1, 2, 6])
def test_fixed_count_records_hold_k_lines_at_about_l_tokens(tok, k):
    """Exactly K lines at every length, at most L tokens and one more filler sentence would pass L; example i has
    the same keys, values, asked line and depths at every L (the matched comparison is paired)."""
    seen = {}
    for fmt in ("short", "longeval"):
        task = LinesTask(prompt_format=fmt, num_lines=k)
        for length in (400, 1024, 2560):
            for e in task.examples(Setting(f"{length}", length, "tokens"), tok, 3, seed=5):
                lines = LINE.findall(e.prompt)
                assert len(lines) == k and e.meta["n_lines"] == k
                assert e.prompt.startswith(SHORT_HEADER if fmt == "short" else HEADER)
                assert lines[e.meta["query_position"]] == (e.meta["query_idx"], str(e.target))
                assert e.prompt.endswith(f"in line {e.meta['query_idx']}? I need the number.")
                s, m = case_seed(5, int(e.id.split("-")[1])), e.meta["filler_sentences"]
                case, where = lines_case_at(k, s, fmt), depths(k, s)
                assert filled_prompt(case, where, m) == e.prompt
                assert e.actual_tokens <= length < _tokens(tok, filled_prompt(case, where, m + 1))
                seen.setdefault(e.id, set()).add((tuple(lines), e.meta["query_position"], e.meta["query_depth"]))
    assert all(len(v) == 1 for v in seen.values()), seen
    (more,) = LinesTask(num_lines=k).examples(Setting("2560", 2560, "tokens"), tok, 1, seed=5)
    (less,) = LinesTask(num_lines=k).examples(Setting("400", 400, "tokens"), tok, 1, seed=5)
    assert more.meta["filler_sentences"] > 4 * less.meta["filler_sentences"] > 0


def test_without_filler_a_record_is_the_benchmarks_record_of_k_lines(tok):
    (e,) = LinesTask(num_lines=3, prompt_format="short").examples(Setting("300", 300, "tokens"), tok, 1, seed=2)
    pairs = tuple((idx, int(n)) for idx, n in LINE.findall(e.prompt))
    case = LinesCase(pairs, e.meta["query_position"], "short")
    assert filled_prompt(case, [0.0, 0.5, 1.0], 0) == lines_prompt(list(pairs), e.meta["query_idx"], "short")


def test_each_line_keeps_its_depth_in_the_filler(tok):
    """A line at depth d has about d of the filler sentences before it, at every length."""
    for length in (1024, 4096):
        for e in LinesTask(num_lines=2).examples(Setting(str(length), length, "tokens"), tok, 4, seed=9):
            before = e.prompt.split(f"line {e.meta['query_idx']}:")[0]
            share = sum(before.count(s) for s in SENTENCES) / e.meta["filler_sentences"]
            assert abs(share - e.meta["query_depth"]) <= 1.5 / e.meta["filler_sentences"], (share, e.meta)


def test_without_a_count_records_are_as_the_benchmark_builds_them(tok):
    """No task.num_lines: lines fill the length, no filler (the behaviour every earlier cell ran), and the cell's
    hash is the one it had before the key existed."""
    (e,) = LinesTask().examples(Setting("512", 512, "tokens"), tok, 1, seed=0)
    assert "The grass is green" not in e.prompt and "filler_sentences" not in e.meta and e.meta["n_lines"] > 10
    cfg = compose_run(["profile=paper", "model=flan-t5-xl", "task=lines"])  # no lines format: both keys null
    setting = resolve_settings(cfg.task, "paper", int(cfg.model.l_tr))[0]
    with_keys = config_hash(cfg, setting)
    from omegaconf import OmegaConf
    plain = OmegaConf.to_container(cfg, resolve=True)
    del plain["task"]["num_lines"], plain["task"]["format"]
    assert config_hash(OmegaConf.create(plain), setting) == with_keys


@pytest.mark.parametrize("args, expected", [
    (["task.num_lines=12", "task.settings=[200]", "task.unit=tokens"], "none of 200 draws of 12 lines fits 200"),
    (["task.num_lines=3"], "task.unit=lines settings"),
    (["task.num_lines=3", "task.unit=tokens"], "needs explicit lengths"),
    (["task.num_lines=0", "task.settings=[256]", "task.unit=tokens"], "not a count of lines"),
    (["task.num_lines=99999", "task.settings=[9999999]", "task.unit=tokens"], "distinct keys"),
    (["task.format=medium"], "no such lines format"),
    (["profile=paper", "model=flan-t5-xl", "task.format=short"], "profile=paper keeps LongEval's prompt"),
])
def test_counts_that_cannot_run_stop_before_work(args, expected, capsys, tmp_path):
    assert expected in refused_before_work(["run", "task=lines", f"results_dir={tmp_path}", *args], capsys, tmp_path)


@pytest.mark.parametrize("task, key", [("topics", "num_topics"), ("lines", "num_lines")])
def test_each_count_is_its_own_column(task, key, capsys, tmp_path):
    """K = 1 and K = 3 at the same length are two cells (a count never overwrites another)."""
    for k in (1, 3):
        main(["run", f"task={task}", f"task.{key}={k}", "task.settings=[256]", "task.unit=tokens",
              "task.format=short", "task.num_examples=2", f"results_dir={tmp_path}", "--dry-run"])
    out = capsys.readouterr().out
    assert all(f"cell mini-t5|none|{task}|256tokens-{k}{task}" in out for k in (1, 3)), out


def test_the_format_reaches_the_prompt():
    """task.format=short gives the lookup stand-in's header; without it the model's ``lines_format``: mini-t5 hands
    lines to mini-t5-lookup, which names the short format; a paper model names none (LongEval's)."""
    from lengthx.tasks import build_task

    task = build_task(compose_run(["model=mini-t5", "task=lines", "task.format=short"]).task, "mini")
    assert task.prompt_format == "short"
    assert compose_run(["model=mini-t5", "task=lines"]).task.format == "short"
    assert compose_run(["profile=paper", "model=flan-t5-xl", "task=lines"]).task.format is None


def test_a_length_its_lines_do_not_fit_is_an_error_not_a_longer_record(tok):
    """Called past the run's checks (the Python API), a K that cannot fit L raises instead of passing L."""
    with pytest.raises(ValueError, match=r"task.num_lines=12, example 0: none of 200 draws of 12 lines fits 200 "
                                         r"tokens without filler \(header, lines, question; the shortest needs \d+\)"):
        LinesTask(num_lines=12).examples(Setting("200", 200, "tokens"), tok, 1, seed=0)


def _own_fits(tok, k: int, seed: int, i: int, length: int) -> bool:
    return _tokens(tok, lines_case_at(k, case_seed(seed, i), "short").prompt) <= length


def test_an_example_whose_lines_do_not_fit_is_drawn_again_the_same_at_every_length(tok):
    """Near capacity (11 lines at L_tr = 256 in the short format) an example whose own lines do not fit is drawn
    again until they fit L_tr, and is that one record at every length from L_tr up; the others are their own draw."""
    task = LinesTask(prompt_format="short", num_lines=11)
    task.set_training_length(256)
    skipped = [i for i in range(40) if not _own_fits(tok, 11, 600, i, 256)]
    assert skipped and len(skipped) < 10, skipped  # some, not most, of the own draws exceed L_tr
    by_length = {L: task.examples(Setting(str(L), L, "tokens"), tok, 40, seed=600) for L in (256, 1024)}
    for i, e in enumerate(by_length[256]):
        lines = LINE.findall(e.prompt)
        assert len(lines) == 11 and e.actual_tokens <= 256
        draw = e.meta.get("redraws", 0)
        assert (draw > 0) == (i in skipped)
        assert lines == [(idx, str(n)) for idx, n in lines_case_at(11, draw_seed(case_seed(600, i), draw), "short").pairs]
        far = by_length[1024][i]
        assert LINE.findall(far.prompt) == lines and far.meta.get("redraws", 0) == draw
        assert far.meta["query_position"] == e.meta["query_position"] and far.target == e.target
    # without the model's L_tr (the Python API on a bare task) each length draws for itself: at 1024 every own fits
    bare = LinesTask(prompt_format="short", num_lines=11).examples(Setting("1024", 1024, "tokens"), tok, 40, seed=600)
    assert not any("redraws" in e.meta for e in bare)


def test_a_count_no_l_tr_draw_holds_is_drawn_to_fit_its_setting(tok):
    """13 lines never fit L_tr = 256 (short format); at 1024 they do, and such a run is not refused."""
    task = LinesTask(prompt_format="short", num_lines=13)
    task.set_training_length(256)
    (e,) = task.examples(Setting("1024", 1024, "tokens"), tok, 1, seed=3)
    assert len(LINE.findall(e.prompt)) == 13 and "redraws" not in e.meta and e.actual_tokens <= 1024


def test_the_card_keeps_each_seeds_own_draw(tok):
    """The lookup stand-in's padded held-out sets (lines-fill-n<K>) skip a seed whose own lines do not fit, as they
    did when its bar was fixed, instead of taking the task's redraw."""
    from lengthx.minis.retrieval_eval import lines_filled

    got = lines_filled(tok, LinesTask(prompt_format="short", num_lines=12), 256, 3, seed=500_000)
    seeds = [int(e.id.split("-")[0]) for e in got]
    assert not any("redraws" in e.meta for e in got)
    assert all(_own_fits(tok, 12, s, 0, 256) for s in seeds)
    assert not any(_own_fits(tok, 12, s, 0, 256) for s in range(500_000, seeds[-1]) if s not in seeds)
