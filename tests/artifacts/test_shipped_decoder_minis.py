"""Checks of committed artifacts and docs (tests/artifacts/README.md): they fail when the committed results,
checkpoints or docs are out of step with the code, not when the code breaks."""

from __future__ import annotations

import json
import math

import pytest
from test_minis import CHECKPOINTS, DECODER_MINIS, compose_run

from lengthx.models.minis import apply_profile

pytestmark = pytest.mark.usefixtures("one_thread")


def test_shipped_decoder_minis_are_small_fp16_and_documented():
    total = 0
    for name in DECODER_MINIS:
        d = CHECKPOINTS / name
        meta = json.loads((d / "lengthx_mini.json").read_text())
        config = json.loads((d / "config.json").read_text())
        assert config["dtype"] == "float16"
        total += sum(p.stat().st_size for p in d.iterdir())
        card = (d / "README.md").read_text()
        for key in ("ppl", "unigram_ppl"):  # the card quotes the measured numbers
            assert f"{meta[key]:.2f}" in card
        assert meta["ppl"] < meta["unigram_ppl"] / 3 and meta["l_t"] == 128
    assert total <= 20 * 2**20


@pytest.mark.parametrize("name", DECODER_MINIS)
def test_shipped_decoder_mini_beats_unigram_on_held_out_files(name):
    """Perplexity at L_t well below the unigram baseline: the card's number, recomputed on its held-out sequences."""
    from lengthx.models.loading import load_model
    from lengthx.tasks.segmented_ppl import SegmentedPPLTask, sequence_nll

    model = next(m for m, mini in (("gpt2", "mini-gpt2"), ("pythia-160m", "mini-pythia"), ("bloom-1b1", "mini-bloom"))
                 if mini == name)
    cfg = apply_profile(compose_run(f"model={model}", "task=segmented_ppl", "data=stdlib"))  # its own domain
    loaded = load_model(cfg.model, device="cpu", dtype="float32")
    meta = json.loads((CHECKPOINTS / name / "lengthx_mini.json").read_text())
    seqs = SegmentedPPLTask(cfg.task, "mini").sequences(loaded.tokenizer, 128, meta["eval_sequences"])
    ppls = []
    for _, ids in seqs:
        nll, n = sequence_nll(loaded.model, ids.unsqueeze(0))
        ppls.append(math.exp(float(nll.sum()) / int(n.sum())))
    mean = sum(ppls) / len(ppls)
    assert mean < meta["unigram_ppl"] / 3
    assert mean == pytest.approx(meta["ppl"], rel=1e-3)  # the card's number, from the shipped fp16 weights
