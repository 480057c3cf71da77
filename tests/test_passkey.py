"""Passkey task: the reference format (docs/design.md §6), token-exact fitting, seeding, scoring."""

from __future__ import annotations

from lengthx.tasks.base import Setting
from lengthx.tasks.metrics import passkey_correct
from lengthx.tasks.passkey import FILLER_UNIT, PasskeyTask, filler, passkey_prompt


def test_prompt_format_is_the_reference():
    p = passkey_prompt(4242, 200, 90)
    lines = p.split("\n")
    assert lines[0] == ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
                        "them. I will quiz you about the important information there.")
    assert lines[1] == filler(200)[:90]
    assert lines[2] == "The pass key is 4242. Remember it. 4242 is the pass key."
    assert lines[3] == filler(110)  # the suffix is cut from the filler's start again (see below)
    assert lines[4] == "What is the pass key? The pass key is"
    assert filler(200).startswith(FILLER_UNIT + " The grass") and len(filler(200)) == 200


def test_suffix_filler_restarts_at_the_unit_start_as_upstream():
    """Landmark Attention cuts prefix and suffix from the start of one repeated text
    (``garbage_inf[:n_garbage_prefix]``, ``garbage_inf[:n_garbage_suffix]``): after the key the filler starts
    again at "The grass is green.", it does not continue mid-sentence where the prefix stopped."""
    for n_garbage, prefix in ((200, 90), (500, 37), (400, 0), (300, 300)):
        lines = passkey_prompt(1, n_garbage, prefix).split("\n")
        assert lines[1] == filler(prefix) and lines[3] == filler(n_garbage - prefix)
        assert len(lines[1]) + len(lines[3]) == n_garbage
        assert not lines[3] or FILLER_UNIT.startswith(lines[3][:len(FILLER_UNIT)])
    assert passkey_prompt(1, 200, 90).split("\n")[3].startswith("The grass is green. The sky")


def test_examples_fit_tokens_and_are_seeded(byt5):
    tok = byt5
    task = PasskeyTask()
    ex = task.examples(Setting("1k", 1000, "tokens"), tok, 5, seed=3)
    assert all(abs(e.actual_tokens - 1000) / 1000 <= 0.02 and e.requested_tokens == 1000 for e in ex)
    assert [e.prompt for e in ex] == [e.prompt for e in task.examples(Setting("1k", 1000, "tokens"), tok, 5, 3)]
    assert [e.target for e in ex] != [e.target for e in task.examples(Setting("1k", 1000, "tokens"), tok, 5, 4)]
    chars = task.examples(Setting("20k", 2000, "chars"), tok, 2, seed=3)
    assert all(e.meta["n_garbage"] == 2000 and e.requested_tokens is None for e in chars)
    assert [e.target for e in chars] == [e.target for e in ex[:2]]  # same cases whatever the length


def test_scoring_takes_the_first_integer():
    assert passkey_correct("31415", 31415)
    assert passkey_correct(" 31415. The pass key is 31415", 31415)
    assert not passkey_correct("7 31415", 31415)  # extra number first: wrong, as upstream
    assert not passkey_correct("314150", 31415)
    assert not passkey_correct("no digits", 31415)
    assert PasskeyTask().score("12", type("E", (), {"target": 12})())["accuracy"] == 100.0


def test_task_only_keeps_the_named_columns():
    import pytest
    from omegaconf import OmegaConf

    from lengthx.tasks.base import resolve_settings

    cfg = OmegaConf.load(__import__("pathlib").Path(__file__).parents[1] / "lengthx/conf/task/passkey.yaml")
    all_ = resolve_settings(cfg, "mini", 256)
    assert [s.label for s in all_] == ["20k", "30k", "40k", "50k", "55k"]
    assert [s.value for s in all_] == [round(v * 256 / 512) for v in cfg.paper_l_ex]  # ratios kept at L_tr 256
    cfg.only = ["55k", "20k"]
    assert [s.label for s in resolve_settings(cfg, "mini", 256)] == ["20k", "55k"]
    cfg.only = ["60k"]
    with pytest.raises(ValueError, match="60k"):
        resolve_settings(cfg, "mini", 256)
