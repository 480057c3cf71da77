"""The minis' recipes on their one loop (lengthx.minis) retrain what the scripts with their own loops trained:
on a tiny configuration of each recipe, from the same seed, the curve rows equal those the earlier scripts logged
(tests/data/minis_tiny_curves.json, written by them before the merge); a stopped and resumed decoder run ends on
the weights of an uninterrupted one, bit for bit. The shipped checkpoints' own first logged rows were retrained
the same way at full size (docs/design.md, "The minis' trainers")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CURVES = json.loads((Path(__file__).parent / "data" / "minis_tiny_curves.json").read_text())
T5_TINY = ["--device", "cpu", "--d-model", "32", "--d-kv", "8", "--d-ff", "64", "--heads", "4", "--enc-layers", "1",
           "--dec-layers", "1", "--batch-size", "8", "--log-every", "2", "--eval-every", "1000", "--eval-n", "2",
           "--final-n", "2", "--final-lengths", "256", "--max-minutes", "0", "--max-steps", "6", "--warmup", "2"]
COUNTS = ["--w-lines", "0", "--w-passkey", "0.5", "--w-topics", "0.5", "--topics-records", "counts", "--topics-k-max",
          "6", "--topics-format", "short", "--card-counts", "1,2", "--gate-minutes", "0"]
LM_TINY = ["--d-model", "32", "--heads", "4", "--d-ff", "64", "--enc-layers", "1", "--dec-layers", "1", "--batch-size",
           "4", "--steps", "6", "--warmup", "2", "--log-every", "2", "--save-every", "3", "--snapshots", ""]
DEC_TINY = ["--families", "gpt2", "pythia", "bloom", "--steps", "4", "--width", "32", "--layers", "1", "--heads", "2",
            "--batch-size", "2", "--eval-sequences", "4"]
TOLERANCE = 2e-4  # the rows are rounded to 4 decimals; another CPU's kernels may move a value across a rounding

pytestmark = pytest.mark.usefixtures("one_thread")


def _same_rows(got: list[dict], want: list[dict]) -> None:
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want, strict=True):
        for key, value in w.items():
            if key.startswith(("loss", "em_", "held_out_loss")) and isinstance(value, float | int):
                assert g[key] == pytest.approx(value, abs=TOLERANCE), (g["step"], key)


@pytest.mark.slow
@pytest.mark.parametrize("case, extra", [("mini-t5 lines", []), ("mini-t5 counts", COUNTS)])
def test_the_retrieval_recipe_logs_the_earlier_scripts_curve(tmp_path, case, extra):
    from lengthx.minis.retrieval import main

    assert main(["--out", str(tmp_path), *T5_TINY, *extra]) == 0
    _same_rows(json.loads((tmp_path / "curve.json").read_text()), CURVES[case])


@pytest.mark.slow
def test_the_t5_lm_recipe_logs_the_earlier_scripts_curve(tmp_path):
    from lengthx.minis.t5_lm import main

    main(["--out", str(tmp_path), *LM_TINY])
    _same_rows(json.loads((tmp_path / "curve.json").read_text()), CURVES["mini-t5-lm"])


def _decoder_work(tmp_path: Path) -> Path:
    """A work directory holding the shipped decoder minis' tokenizer (so none is trained here)."""
    work = tmp_path / "work"
    (work / "tokenizer").mkdir(parents=True)
    for f in (ROOT / "lengthx" / "checkpoints" / "mini-gpt2").glob("tokenizer*.json"):
        shutil.copy(f, work / "tokenizer" / f.name)
    return work


@pytest.mark.slow
def test_the_decoder_recipes_log_the_earlier_scripts_curve_and_resume_exactly(tmp_path):
    """Each family trained and exported by :func:`lengthx.minis.decoders.pretrain` (the add-one unigram baseline of
    its card, a pass over the whole training corpus, is left out here: it does not touch the weights)."""
    from transformers import AutoTokenizer

    from lengthx.minis.decoders import parse_args, pretrain
    from lengthx.minis.decoders_card import held_out_sequences

    work, out = _decoder_work(tmp_path), tmp_path / "out"
    args = parse_args([*DEC_TINY, "--log-every", "1", "--work", str(work), "--out", str(out)])
    args.corpus = {"stdlib": "", "train_files": 0, "test_files": 0}
    tok = AutoTokenizer.from_pretrained(str(work / "tokenizer"))
    seqs = held_out_sequences(tok, args.l_t, args.eval_sequences)
    for family in args.families:
        name = pretrain(family, args, tok, seqs, (float("nan"), float("nan")))["name"]
        _same_rows(json.loads((out / name / "curve.json").read_text()), CURVES[name])
        meta = json.loads((out / name / "lengthx_mini.json").read_text())
        assert meta["steps"] == 4 and meta["ppl"] == pytest.approx(CURVES["held-out ppl"][name], rel=1e-5)
    # gpt2 again: once straight through its 4 steps, once stopped after 2 and resumed from state.pt
    straight = _gpt2(_decoder_work(tmp_path / "a"), [4])
    resumed = _gpt2(_decoder_work(tmp_path / "b"), [2, 4])
    assert all(torch.equal(a, b) for a, b in zip(straight, resumed, strict=True))


def _gpt2(work: Path, stops: list[int]) -> list[torch.Tensor]:
    """mini-gpt2's tiny recipe trained in ``work``, one process per stop (each resumes from the last); its weights."""
    from transformers import AutoTokenizer

    from lengthx.minis.decoders import DecoderRecipe, parse_args
    from lengthx.minis.loop import Box, TrainingLoop

    args = parse_args(["--families", "gpt2", *DEC_TINY[4:], "--work", str(work)])
    tok = AutoTokenizer.from_pretrained(str(work / "tokenizer"))
    for stop in stops:
        recipe = DecoderRecipe("gpt2", args, tok)
        loop = TrainingLoop(recipe.work / "train", recipe.model, recipe.optimizer, recipe,
                            Box(recipe.plan.steps, stop_step=stop), {"step": 0, "seconds": 0.0, "curve": []})
        loop.resume()
        loop.run()
        assert loop.step == stop
    return [p.detach().clone() for p in recipe.model.parameters()]


@pytest.mark.slow
def test_the_shipped_mini_pythia_retrains_to_its_first_logged_loss(tmp_path):
    """At full size, from the command its card records: the first 25 steps of the recipe log the shipped curve's
    first row. (mini-gpt2 and mini-bloom log theirs at step 25 too, mini-t5 and mini-t5-lm at step 50, a minute
    or more each on one core: retrained the same way with lengthx.minis.retrain.retrain_rows, outside the suite.)"""
    from lengthx.minis.retrain import retrain_rows, shipped_curve

    (row,) = retrain_rows("mini-pythia", tmp_path, 25)
    assert row["step"] == 25 == shipped_curve("mini-pythia")[0]["step"]
    assert row["loss"] == pytest.approx(shipped_curve("mini-pythia")[0]["loss"], abs=TOLERANCE)
