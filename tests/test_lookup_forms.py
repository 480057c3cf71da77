"""The lookup stand-in's record forms (lengthx.minis.lookup_data, lengthx.minis.curriculum; docs/mini-t5-lookup.md,
variant P): one-piece records, the benchmark's records unchanged, the forms trained in turn and resumed only as
they were saved."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from lengthx.minis.curriculum import Curriculum
from lengthx.minis.lookup_data import MAX_VALUE, ONE_PIECE_MAX, form_capacity, lookup_record, one_piece_words
from lengthx.minis.retrieval_args import parse_args
from lengthx.tasks.lines import random_line_indices

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
_LINE = re.compile(r"line (\S+): REGISTER_CONTENT is <(\d+)>")


@pytest.fixture(scope="module")
def tok():
    return PreTrainedTokenizerFast.from_pretrained(ROOT / "lengthx" / "checkpoints" / "mini-t5",
                                                   trust_remote_code=False)


def _keys_after_line(pieces: list[str]) -> list[list[str]]:
    """The pieces after each ``line`` piece up to its ``:`` or ``?`` (a lone ``▁`` left out)."""
    out = []
    for i, piece in enumerate(pieces):
        if piece.lstrip("▁") == "line":
            end = next(j for j in range(i + 1, len(pieces)) if pieces[j] in (":", "?"))
            out.append([p for p in pieces[i + 1:end] if p != "▁"])
    return out


def test_one_piece_records_have_keys_of_one_token_words_and_values_of_one_token(tok):
    adjectives, nouns = one_piece_words(tok)
    assert len(adjectives) > 100 and len(nouns) > 500  # enough words for records of every count that fits
    for seed in range(20):
        prompt, target, kept = lookup_record(tok, 256, 12, seed % 2 == 0, random.Random(seed), "short", "one-piece")
        pairs = _LINE.findall(prompt)
        assert len(pairs) == kept and kept >= 10
        for key, value in pairs:
            adjective, noun = key.split("-")
            assert adjective in adjectives and noun in nouns
            assert 1 <= int(value) <= ONE_PIECE_MAX
            assert len([t for t in tok.tokenize(f"<{value}>") if t.strip("▁")]) == 3  # "<", the value, ">"
        keys = _keys_after_line(tok.tokenize(prompt))  # in each line, and in a single question
        assert len(keys) == kept + (seed % 2) and all(len(k) == 3 and k[1] == "-" for k in keys), keys
        answers = [f"{k} is {v}" for k, v in pairs]
        if seed % 2 == 0:  # multi-query: every kept line answered, in the asked order
            assert sorted(target.rstrip(".").split(". ")) == sorted(answers)
        else:
            assert target in answers


def test_benchmark_records_are_the_stream_the_warm_variant_trained_on(tok):
    """The benchmark form draws as the lookup records always did: the LongEval indices, then 1..50000 values."""
    for seed in range(5):
        prompt, target, kept = lookup_record(tok, 256, 6, False, random.Random(seed), "short")
        rng = random.Random(seed)
        keys = random_line_indices(6, rng)
        values = [rng.randint(1, MAX_VALUE) for _ in keys]
        assert _LINE.findall(prompt) == [(k, str(v)) for k, v in zip(keys, values, strict=True)][:kept]
        assert lookup_record(tok, 256, 6, False, random.Random(seed), "short", "benchmark") == (prompt, target, kept)


def _pass(cur: Curriculum, step: int) -> bool:
    cur.update(torch.full((4,), cur.stage), torch.ones(4, dtype=torch.bool))
    return cur.advance(step)


def test_the_curriculum_trains_each_form_to_its_full_stage_in_turn():
    cur = Curriculum(capacity=2, gate=0.9, window=4, device=CPU, forms=("one-piece", "benchmark"))
    assert (cur.form, cur.stage, cur.lines_count) == ("one-piece", 1, 1)
    assert _pass(cur, 10) and (cur.form, cur.stage) == ("one-piece", 2)
    assert _pass(cur, 20) and (cur.form, cur.stage, cur.full) == ("benchmark", 1, False)  # one-piece's full stage
    assert cur.lines_count == 1 and cur.passed == {}
    assert _pass(cur, 30) and _pass(cur, 40) and cur.full and cur.form == "benchmark"
    assert not _pass(cur, 50)  # the last form's full stage is the end
    assert cur.gates() == {"one-piece 1": 10, "one-piece 2": 20, "benchmark 1": 30, "benchmark 2": 40}
    restored = Curriculum(capacity=2, gate=0.9, window=4, device=CPU, forms=("one-piece", "benchmark"))
    restored.load_state_dict(json.loads(json.dumps(cur.state_dict())))
    assert (restored.form, restored.stage, restored.gates()) == (cur.form, cur.stage, cur.gates())


def test_a_form_before_the_last_ends_at_the_lines_its_records_hold(tok):
    """The one-piece form's stages end where its records stop fitting L_tr, so its full stage is reached and the
    benchmark's form begins (a stage of more lines than ever fit would never pass its gate)."""
    n = form_capacity(tok, 256, "one-piece")
    assert n >= 10
    kept = [lookup_record(tok, 256, n + 1, False, random.Random(i), "short", "one-piece")[2] for i in range(20)]
    assert all(lookup_record(tok, 256, n, False, random.Random(i), "short", "one-piece")[2] == n for i in range(20))
    assert min(kept) <= n  # n + 1 lines do not always fit
    assert form_capacity(tok, 100_000, "one-piece", draws=1) == len(one_piece_words(tok)[0])  # keys run out first
    cur = Curriculum(capacity=15, gate=0.9, window=4, device=CPU, forms=("one-piece", "benchmark"),
                     capacities={"one-piece": 2})
    assert _pass(cur, 10) and _pass(cur, 20) and (cur.form, cur.stage, cur.capacity) == ("benchmark", 1, 15)


def test_a_saved_curriculum_resumes_only_with_the_forms_it_was_saved_with():
    one = Curriculum(capacity=3, gate=0.9, window=4, device=CPU)
    _pass(one, 10)
    old = {k: v for k, v in one.state_dict().items() if k not in ("forms", "form_index", "earlier")}
    again = Curriculum(capacity=3, gate=0.9, window=4, device=CPU)
    again.load_state_dict(old)  # a state saved before forms existed is of the benchmark form
    assert (again.stage, again.gates()) == (2, {1: 10})
    other = Curriculum(capacity=3, gate=0.9, window=4, device=CPU, forms=("one-piece", "benchmark"))
    with pytest.raises(ValueError, match="resume with --lookup-forms benchmark"):
        other.load_state_dict(old)


@pytest.mark.parametrize("forms, needle", [
    ("benchmark,one-piece", "ending with benchmark"), ("two-piece,benchmark", "distinct forms of"),
    ("benchmark,benchmark", "distinct forms of")])
def test_bad_lookup_forms_are_refused_by_the_trainer_and_the_cli(forms, needle, capsys, as_a_process):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--out", "x", "--lines-records", "lookup", "--lookup-forms", forms])
    assert exc.value.code == 2 and needle in capsys.readouterr().err
    p = as_a_process(["lengthx", "train-mini", "recipe=lookup", f"lookup_forms=[{forms}]", "out=x"])
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0] and "lookup_forms" in lines[0]


def test_lookup_forms_need_lookup_records(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--out", "x", "--lookup-forms", "one-piece,benchmark"])
    assert exc.value.code == 2 and "needs --lines-records lookup" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_with_forms_logs_its_form_and_resumes_only_with_them(tmp_path, as_a_process):
    from test_train_mini import TINY

    out = tmp_path / "run"
    base = ["lengthx", "train-mini", "recipe=lookup", *TINY["retrieval"], "log_every=1", f"out={out}"]
    p = as_a_process([*base, "stop_step=2", "lookup_forms=[one-piece,benchmark]"])
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads((out / "curve.json").read_text())
    assert [(r["step"], r["form"]) for r in rows] == [(1, "one-piece"), (2, "one-piece")]
    q = as_a_process([*base, "stop_step=3"])  # the recipe's default: the benchmark form alone
    assert q.returncode != 0 and "resume with --lookup-forms one-piece,benchmark" in q.stderr
    assert "Traceback" not in q.stderr


def test_a_padded_record_is_the_same_record_with_filler_around_its_lines(tok):
    """fill=True keeps the record's lines (in order), question and target, and adds the passkey task's filler up
    to a drawn length within L_tr; the records before the option draw as they did."""
    from lengthx.tasks.passkey import FILLER_UNIT

    grew = 0
    for seed in range(12):
        plain = lookup_record(tok, 256, 3, seed % 2 == 0, random.Random(seed), "short")
        filled = lookup_record(tok, 256, 3, seed % 2 == 0, random.Random(seed), "short", fill=True)
        assert filled[1:] == plain[1:] and _LINE.findall(filled[0]) == _LINE.findall(plain[0])
        assert filled[0].split("?")[-1] == plain[0].split("?")[-1] and len(tok(filled[0])["input_ids"]) <= 256
        body = filled[0].split("Now the record start:\n\n")[1].split("\nNow the record is over")[0]
        assert all(line.startswith("line ") or set(line.split(". ")) <= set(FILLER_UNIT.rstrip(".").split(". ")) |
                   {s + "." for s in FILLER_UNIT.rstrip(".").split(". ")} for line in body.strip("\n").split("\n"))
        grew += len(tok(filled[0])["input_ids"]) > len(tok(plain[0])["input_ids"]) + 20
    assert grew >= 6


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_the_fill_share_pads_that_share_and_none_draws_the_old_stream(tok, share):
    from lengthx.minis.lookup_data import LookupRecords

    records = LookupRecords(tok, 256, 0, 0.5, "short", 224, CPU, fill_share=share)
    batch, kept, multi = records.sample(7, [2, 2, 3, 3])
    prompts = tok.batch_decode(batch.input_ids, skip_special_tokens=True)
    rng = random.Random("lookup:0:7")
    old = [lookup_record(tok, 256, n, i < 2, rng, "short")[0] for i, n in enumerate([2, 2, 3, 3])]
    padded = ["The grass is green" in p for p in prompts]
    if share == 0.0:  # no draw for the fill: the records every earlier run trained on
        assert prompts == tok.batch_decode(tok(old, padding="max_length", max_length=256).input_ids,
                                           skip_special_tokens=True) and not any(padded)
    else:  # each padded to a length drawn between its own and L_tr (its own: no filler)
        assert sum(padded) >= 3


def test_the_bar_holds_the_padded_counts_when_the_card_names_them():
    from argparse import Namespace

    from lengthx.minis.retrieval_card import retrieval_bar

    args = Namespace(l_tr=256, w_passkey=0, w_topics=0, w_lines=1, card_counts="", card_lines="2",
                     card_fill_lines="2,11")
    final = {"lines@256": 95.0, "lines-n2@256": 95.0, "lines-fill-n2@256": 95.0, "lines-fill-n11@256": 89.0}
    bar, met = retrieval_bar(args, final)
    assert "padded with filler to L_tr at K = 2, 11" in bar and not met
    assert retrieval_bar(args, {**final, "lines-fill-n11@256": 90.0})[1]
    assert retrieval_bar(Namespace(**{**vars(args), "card_fill_lines": ""}), final)[1]
