"""``scripts/studies/lookup_attention.py`` (docs/mini-t5-lookup.md): where a snapshot looks
on records of two lines. The places it reads attention at must be the keys and numbers they name, and its shares
must tell a lookup by key from a pick by place."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from conftest import load_script
from transformers import PreTrainedTokenizerFast, T5ForConditionalGeneration

from lengthx.minis.lookup_data import FORMS, lookup_record

MINI = Path(__file__).resolve().parents[1] / "lengthx" / "checkpoints" / "mini-t5"


@pytest.fixture(scope="module")
def attention():
    return load_script("scripts/studies/lookup_attention.py")


@pytest.fixture(scope="module")
def tok():
    return PreTrainedTokenizerFast.from_pretrained(MINI)


@pytest.mark.parametrize("form", FORMS)
def test_the_tokens_read_are_the_records_keys_and_numbers(attention, tok, form):
    for i in range(6):
        prompt, target, kept = lookup_record(tok, 256, 2, False, random.Random(f"places:{i}"), "short", form)
        where = attention.places(prompt, target)
        p_off = tok(prompt, return_offsets_mapping=True)["offset_mapping"]
        t_enc = tok(target, return_offsets_mapping=True)
        lines = attention.LINE.findall(prompt)
        for (key, number), k_span, n_span in zip(lines, where.keys, where.numbers, strict=True):
            ids = tok(prompt)["input_ids"]
            assert tok.decode([ids[j] for j in attention.token_positions(p_off, k_span)]).strip() == key
            assert tok.decode([ids[j] for j in attention.token_positions(p_off, n_span)]).strip() == number
        assert target.startswith(lines[where.asked][0] + " is ")
        step = attention.token_positions(t_enc["offset_mapping"], where.answer)[0]
        assert lines[where.asked][1].startswith(tok.decode([t_enc["input_ids"][step]]).strip())


def test_the_shares_tell_a_lookup_by_key_from_a_pick_by_place(attention):
    """Query 0 of head 0 attends to the asked line's number, of head 1 always to the first line's number."""
    for asked, other in (([3], [7]), ([7], [3])):
        attn = torch.zeros(2, 1, 10)
        attn[0, 0, asked] = 1.0
        attn[1, 0, 3] = 0.5
        attn[1, 0, 0] = 0.5  # half its mass elsewhere
        share, mass = attention.share(attn, 0, asked, other)
        assert share.tolist() == [1.0, 1.0 if asked == [3] else 0.0]
        assert mass.tolist() == [1.0, 0.5]


def test_a_snapshots_shares_are_means_over_its_layers_and_heads(attention, tok):
    model = T5ForConditionalGeneration.from_pretrained(MINI, dtype=torch.float32, attn_implementation="eager").eval()
    m = attention.measure(model, tok, attention.records(tok, 2, 4, 256, "short", "one-piece", seed="attention:{i}"))
    c = model.config
    for kind in attention.KINDS:
        layers = c.num_layers if kind == "encoder" else c.num_decoder_layers
        mass = m[f"{attention.MASS_OF.get(kind, kind)} mass"]
        assert m[kind].shape == mass.shape == (layers, c.num_heads)
        assert ((0 <= m[kind]) & (m[kind] <= 1)).all() and ((0 < mass) & (mass <= 1)).all()
    assert attention.table("mini/step-0", "one-piece", m)[0].startswith("| mini/step-0 | one-piece | encoder | 0 | ")


def test_kept_shares_give_the_table_measured_afresh_and_are_read_only_for_the_same_records(attention, tmp_path):
    """A rerun over a snapshot whose shares are kept measures nothing and writes the same table as a run that keeps
    nothing; other records are measured, or with ``kept_only`` refused."""
    import shutil

    snap = tmp_path / "warm" / "step-00100"
    shutil.copytree(MINI, snap)
    cache = tmp_path / "shares"
    text, measured = attention.report([snap], 3, 256, "short", ["one-piece"], cache)
    assert measured == 1 and (cache / "warm-step-00100.json").exists()
    assert attention.report([snap], 3, 256, "short", ["one-piece"], cache, kept_only=True) == (text, 0)
    assert attention.report([snap], 3, 256, "short", ["one-piece"]) == (text, 1)
    with pytest.raises(LookupError):
        attention.report([snap], 2, 256, "short", ["one-piece"], cache, kept_only=True)
