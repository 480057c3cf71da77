"""The shipped mini-t5-lm (the mini profile's T5-LM / CodeT5+ stand-in) is what its model card says: the card's
held-out numbers at L_tr, measured by ``scripts/train_mini_t5_lm.py`` (:mod:`lengthx.minis.t5_lm_card`) with the
harness's own ``lm`` and ``code_completion`` tasks on the exported fp16 weights, are measured again from the shipped
files on the same held-out examples (tests/artifacts/README.md)."""

from __future__ import annotations

import json

import pytest
from test_mini_t5_lm import CKPT

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def meta() -> dict:
    return json.loads((CKPT / "lengthx_mini.json").read_text())


def test_shipped_checkpoint_is_small_fp16_and_its_card_quotes_the_measured_numbers(meta):
    config = json.loads((CKPT / "config.json").read_text())
    assert config["dtype"] == "float16" and config["model_type"] == "t5"
    assert config["relative_attention_max_distance"] <= meta["l_tr"] // 2  # as Flan-T5's 128 at L_tr 512
    assert sum(p.stat().st_size for p in CKPT.iterdir()) < 12 * 2**20
    card = (CKPT / "README.md").read_text()
    for key, fmt in (("ppl", ".3f"), ("em", ".1f"), ("es", ".1f")):
        assert f"{meta[key]:{fmt}}" in card
    assert meta["steps"] == 3000 and meta["l_tr"] == 128 and meta["continuation"] == 64


@pytest.mark.slow
def test_held_out_numbers_at_l_tr_match_the_model_card(meta):
    """Perplexity (lm) and next-line EM / ES (code_completion) at L_tr, recomputed from the shipped weights."""
    from lengthx.minis.t5_lm_card import card_metrics

    got = card_metrics(CKPT, meta["l_tr"], meta["n_eval"])
    assert got["continuation"] == meta["continuation"]
    for key in ("ppl", "ppl_tokens", "es"):
        assert got[key] == pytest.approx(meta[key], rel=1e-4), key
    assert got["em"] == pytest.approx(meta["em"], abs=1e-9)
