"""The lookup study's report scripts (docs/mini-t5-lookup.md): how
``scripts/studies/lookup_errors.py`` sorts an answer, and what ``scripts/studies/plot_lookup_curves.py`` writes
from a variant's curve."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

from lengthx.minis.lookup_data import lookup_record

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "lengthx" / "checkpoints" / "mini-t5"


def _script(name: str):
    return load_script(f"scripts/studies/{name}.py")


@pytest.fixture(scope="module")
def tok():
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast.from_pretrained(MINI)


@pytest.fixture(scope="module")
def record(tok):
    """A real three-line record of the trainer's builder, with its lines and the asked one."""
    errors = _script("lookup_errors")
    prompt, target, kept = lookup_record(tok, 256, 3, False, random.Random("test"), "short")
    assert kept == 3
    lines = dict(errors.LINE.findall(prompt))
    asked = errors.ASKED.search(prompt).group(1)
    return errors, prompt, target, lines, asked


def test_an_answer_is_sorted_by_the_line_its_number_and_key_come_from(record, tok):
    errors, prompt, target, lines, asked = record
    other = next(k for k in lines if k != asked)
    assert target == f"{asked} is {lines[asked]}"
    assert errors.classify(target, prompt, tok) == ("right", "asked key")
    assert errors.classify(f"{other} is {lines[other]}", prompt, tok) == ("other line", "other key")
    assert errors.classify(f"{asked} is {lines[other]}", prompt, tok) == ("other line", "asked key")
    assert errors.classify("nothing here", prompt, tok) == ("no line", "no key")


def test_a_garbled_number_is_near_the_line_whose_token_it_shares(record, tok):
    errors, prompt, _, lines, asked = record
    pieces = [t for t in tok.tokenize(lines[asked]) if t.strip("▁")]
    if len(pieces) < 2:
        pytest.skip("the drawn number is one token")
    garbled = pieces[0] + ("1" if pieces[-1] != "1" else "2") * len(pieces[-1])  # its first token, another end
    kind, _ = errors.classify(f"{asked} is {garbled}", prompt, tok)
    others = [v for k, v in lines.items() if k != asked]
    assert kind == ("other line" if garbled in others else "near")
    assert not errors.near(lines[asked], lines[asked], tok)  # the number itself is right, not near
    def tokens(x):
        return [t for t in tok.tokenize(x) if t.strip("▁")]
    ends = {end for v in lines.values() for end in (tokens(v)[0], tokens(v)[-1])}
    unrelated = next(str(n) for n in range(10001, 50000, 7) if not {tokens(str(n))[0], tokens(str(n))[-1]} & ends)
    assert errors.classify(f"{asked} is {unrelated}", prompt, tok) == ("no line", "asked key")


def _rows() -> list[dict]:
    rows = []
    for step in range(100, 1600, 100):
        stage = 1 if step < 1000 else 2
        em = {"1": step / 2000} | ({"2": (step - 1000) / 1000} if stage == 2 else {})
        row = {"step": step, "minutes": step / 20, "stage": stage, "em_by_lines": em, "em_multi_by_lines": em}
        if step % 500 == 0:
            row["held_out"] = {"lines-n2": step / 50, "passkey": 100.0}
        rows.append(row)
    return rows


def test_the_curves_table_lists_every_500_steps_the_last_row_and_the_variants_hours(tmp_path):
    plot = _script("plot_lookup_curves")
    (tmp_path / "train" / "warm").mkdir(parents=True)
    (tmp_path / "train" / "empty").mkdir()
    (tmp_path / "train" / "warm" / "curve.json").write_text(json.dumps(_rows()[::-1]))  # order is not assumed
    (tmp_path / "train" / "empty" / "curve.json").write_text("[]")
    curves = plot.read(tmp_path / "train")
    assert list(curves) == ["warm"]
    text = plot.table(curves)
    assert "## warm: 1,500 steps, 1.2 thread-hours, stage 2" in text
    assert "Stages (by the curve's rows): 1 from the first row, 2 from step 1,000." in text
    steps = [line.split(" | ")[0] for line in text.split("Every 500 steps:")[1].splitlines()
             if line.startswith("| ") and line[2].isdigit()]
    assert steps == ["| 500", "| 1000", "| 1500"]
    assert "| 1000 | 2 | 1: 0.50, 2: 0.00 |" in text and "| 20 |  |  |  | 100 |  |" in text
    for row in curves["warm"]:
        row["form"] = "one-piece"
    assert "## warm: 1,500 steps, 1.2 thread-hours, stage one-piece 2" in plot.table(curves)
    plot.draw(curves, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_the_curves_script_names_the_fix_when_no_variant_has_trained(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "studies" / "plot_lookup_curves.py"), "--train-dir", str(tmp_path),
         "--out-dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1 and "make mini-t5-lookup-study" in proc.stderr and not list(tmp_path.iterdir())


def _two_line_curve(last: int, em, form=lambda step: "benchmark") -> list[dict]:
    """A curve row every 100 steps to ``last``, its 2-line teacher-forced EM ``em(step)`` in ``form(step)``."""
    return [{"step": s, "minutes": s / 100, "stage": 2, "form": form(s), "em_by_lines": {"1": 0.9, "2": em(s)}}
            for s in range(100, last + 1, 100)]


@pytest.mark.parametrize("last, em, form, verdict", [
    (20_000, lambda s: 0.1 + s / 1e5, None, "met: 20,000 steps, past the budget's 20,000"),
    (15_100, lambda s: 0.28, None, "met: past 10,000 and flat"),
    (15_100, lambda s: 0.25 + 0.02 * (s % 3), None, "met: past 10,000 and flat"),  # noise within the band
    (9_900, lambda s: 0.28, None, "not met: 9,900 steps, neither past 20,000 nor past 10,000"),
    (15_100, lambda s: 0.2 + (s - 10_000) / 25_000, None, "not met: past 10,000 but not flat"),  # still rising
    (15_100, lambda s: 0.5, lambda s: "one-piece", "none, none, none, none, none (a block without such records)"),
    (15_100, lambda s: 0.28, lambda s: "benchmark" if s > 11_200 else "one-piece", ": none, 0.28, 0.28, 0.28, 0.28"),
])
def test_the_budget_rule_reads_the_benchmark_forms_two_line_curve(last, em, form, verdict):
    """docs/mini-t5-lookup.md's budget: past 20,000 steps, or past 10,000 and the last 5,000 flat (1,000-step means
    of the benchmark form's 2-line teacher-forced EM within ±0.05 of theirs); P's steps of another form do not count."""
    plot = _script("plot_lookup_curves")
    rows = _two_line_curve(last, em, form or (lambda s: "benchmark"))
    assert verdict in plot.budget(rows)
    assert plot.budget(rows).startswith("met") == verdict.startswith("met")
    assert f"Budget: {plot.budget(rows)}." in plot.table({"v": rows})


def test_the_plateau_table_gives_each_blocks_two_line_mean_by_form():
    """1,000-step means of the 2-line teacher-forced EM, a row per block and form (a block that changes form has
    one of each), the last block ending at the last step; a block with no 2-line records has no row."""
    plot = _script("plot_lookup_curves")
    rows = _two_line_curve(3_500, lambda s: min(s, 2_500) / 10_000, lambda s: "one-piece" if s <= 1_500 else "benchmark")
    for r in rows:
        r["em_multi_by_lines"] = {"2": 0.1}
    del rows[0]["em_by_lines"]["2"]
    table = plot.block_means(rows)
    assert table[2:] == ["| 0-1,000 | one-piece | 0.06 | 0.10 |",  # steps 200-1,000: (0.02 + 0.10) / 2
                         "| 1,000-2,000 | one-piece | 0.13 | 0.10 |", "| 1,000-2,000 | benchmark | 0.18 | 0.10 |",
                         "| 2,000-3,000 | benchmark | 0.24 | 0.10 |", "| 3,000-3,500 | benchmark | 0.25 | 0.10 |"]
    assert "\n".join(table) in plot.table({"v": rows})


def test_the_two_line_table_tells_a_lookup_by_key_from_one_that_ignores_it(tok):
    """Answers sorted by the line asked: the asked line's number fills the diagonal; always the second line's
    number fills one column, whichever line is asked."""
    from collections import Counter

    errors = _script("lookup_errors")
    prompts = [lookup_record(tok, 256, 2, False, random.Random(f"two:{i}"), "short")[0] for i in range(40)]
    places = [errors.asked_place(p) for p in prompts]
    assert set(places) == {1, 2}
    for policy, want in [(lambda lines, asked: lines[asked - 1][1], ("100%", "0%", "0%", "100%")),
                         (lambda lines, asked: lines[1][1], ("0%", "100%", "0%", "100%"))]:
        by_place = Counter()
        for prompt, asked in zip(prompts, places, strict=True):
            answer = f"x is {policy(errors.LINE.findall(prompt), asked)}"
            by_place[(asked, errors.classify(answer, prompt, tok)[0])] += 1
        first, second = errors.place_rows("warm/step-00100", "benchmark", by_place)
        assert first.startswith(f"| warm/step-00100 | benchmark | first | {places.count(1)} | ")
        assert (first.split(" | ")[4:6], second.split(" | ")[4:6]) == (list(want[:2]), list(want[2:]))


def test_kept_answers_are_reused_for_the_same_weights_and_prompts_and_only_for_them(tmp_path, tok):
    """A rerun over a snapshot whose answers are kept generates nothing and gives the same table; new prompts or
    other weights (a snapshot written again under the same name) are generated afresh, and replace the old file."""
    import shutil

    import torch
    from transformers import T5ForConditionalGeneration

    errors = _script("lookup_errors")
    snap = tmp_path / "warm" / "step-00100"
    shutil.copytree(MINI, snap)
    cache = tmp_path / "answers"
    text, generated = errors.report([snap], [1, 2], 4, 256, "short", ["benchmark"], cache)
    assert generated == 8 and (cache / "warm-step-00100.json").exists()
    assert errors.report([snap], [1, 2], 4, 256, "short", ["benchmark"], cache) == (text, 0)
    assert errors.report([snap], [2], 3, 256, "short", ["benchmark"], cache)[1] == 3  # other records: generated
    with pytest.raises(LookupError):
        errors.report([snap], [6], 3, 256, "short", ["benchmark"], cache, kept_only=True)

    model = T5ForConditionalGeneration.from_pretrained(snap)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    model.save_pretrained(snap)
    old = json.loads((cache / "warm-step-00100.json").read_text())["weights"]
    assert errors.report([snap], [1, 2], 4, 256, "short", ["benchmark"], cache)[1] == 8
    assert json.loads((cache / "warm-step-00100.json").read_text())["weights"] not in ("", old)


def test_a_key_with_a_space_is_a_line_of_the_record(tok):
    """The benchmark's adjectives include ``ad hoc``: such a line is read as a line, and asked for as one."""
    errors = _script("lookup_errors")
    spaced_other = spaced_asked = None
    for i in range(2000):
        prompt, target, kept = lookup_record(tok, 256, 2, False, random.Random(f"spaced:{i}"), "short")
        keys = [line.split(": REGISTER")[0][len("line "):] for line in prompt.split("\n") if "REGISTER_CONTENT is" in line]
        asked = target.split(" is ")[0]
        if any(" " in k and k != asked for k in keys):
            spaced_other = spaced_other or (prompt, target, keys)
        if " " in asked:
            spaced_asked = spaced_asked or (prompt, target, keys)
    assert spaced_other and spaced_asked
    prompt, target, keys = spaced_other
    lines = dict(errors.LINE.findall(prompt))
    assert list(lines) == keys
    other = next(k for k in keys if " " in k)
    assert errors.classify(f"x is {lines[other]}", prompt, tok)[0] == "other line"
    prompt, target, keys = spaced_asked
    assert errors.ASKED.search(prompt).group(1) == target.split(" is ")[0]
    assert errors.classify(target, prompt, tok) == ("right", "asked key")


def test_the_filled_table_runs_each_count_once_and_reads_it_back(tmp_path, capsys):
    """A snapshot's K-line records padded to L_tr go through `lengthx run` into its variant's store; the table gives
    each count's accuracy with its interval, and a second pass runs nothing again."""
    import shutil

    from lengthx import mini_path, read_results

    filled = _script("lookup_filled")
    snap = tmp_path / "snapshots" / "variant" / "step-00100"
    shutil.copytree(mini_path("mini-t5"), snap)
    store = tmp_path / "filled"
    for _ in range(2):
        for k in (1, 2):
            filled.run(snap, k, 3, store / "variant")
    rows = read_results(store / "variant", latest=False)
    assert sorted(rows[rows["metric"] == "accuracy"]["setting"]) == ["256tokens-1lines", "256tokens-2lines"]
    text = filled.table([snap], [1, 2, 6], store)
    row = text.splitlines()[-1]
    assert row.startswith("| variant/step-00100 | ") and row.endswith(" |  |")  # K = 6 never run: empty
    assert row.count("% [") == 2
