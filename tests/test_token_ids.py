"""The token-id generators (lengthx.tasks.token_ids) produce exactly the ids of the task modules' own prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import BPE
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from lengthx.tasks import lines, passkey, topics
from lengthx.tasks.token_ids import IGNORE, LinesIds, PasskeyIds, TopicsIds, ids_after

MINI_T5 = Path(__file__).resolve().parents[1] / "lengthx" / "checkpoints" / "mini-t5"
L_MAX = 256


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(MINI_T5))


@pytest.fixture(scope="module")
def gens(tok):
    return {"passkey": PasskeyIds(tok, L_MAX), "lines": LinesIds(tok, L_MAX), "topics": TopicsIds(tok, L_MAX)}


def _check(tok, batch, i: int, prompt: str, answer: str) -> None:
    """Example ``i`` of ``batch`` is the tokenizer's encoding of ``prompt``, and decodes back to it."""
    length = int(batch.draw["length"][i])
    got = batch.input_ids[i, :length].tolist()
    assert got == tok(prompt)["input_ids"]
    assert tok.decode(got, skip_special_tokens=True) == prompt
    assert int(batch.attention_mask[i].sum()) == length and not batch.input_ids[i, length:].any()
    label = [t for t in batch.labels[i].tolist() if t != IGNORE]
    assert label == tok(answer)["input_ids"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_passkey_ids_are_the_passkey_prompts(tok, gens, seed):
    gen = gens["passkey"]
    batch = gen.sample(48, ramp=[1.0, 0.3, 0.0][seed], gen=torch.Generator().manual_seed(seed))
    for i in range(48):
        d = {k: int(v[i]) for k, v in batch.draw.items()}
        _check(tok, batch, i, passkey.passkey_prompt(d["key"], d["n_garbage"], d["prefix_chars"]), str(d["key"]))
    assert int(batch.draw["length"].max()) <= L_MAX
    if seed == 2:  # ramp 0: no filler at all
        assert not batch.draw["n_garbage"].any()


def test_passkey_max_garbage_is_the_largest_filler_that_always_fits(tok, gens):
    g = gens["passkey"].max_garbage
    longest = max(len(tok(passkey.passkey_prompt(50000, g, p))["input_ids"]) for p in range(g + 1))
    assert longest <= L_MAX
    over = max(len(tok(passkey.passkey_prompt(50000, g + 1, p))["input_ids"]) for p in range(g + 2))
    assert over > L_MAX


@pytest.mark.parametrize(("seed", "n_lines"), [(0, 1), (1, 3), (2, 50)])
def test_lines_ids_are_the_lines_prompts(tok, gens, seed, n_lines):
    gen = gens["lines"]
    batch = gen.sample(48, n_lines, gen=torch.Generator().manual_seed(seed))
    for i in range(48):
        pairs, asked = gen.pairs(batch, i)
        assert len({idx for idx, _ in pairs}) == len(pairs)  # distinct line indices
        _check(tok, batch, i, lines.lines_prompt(pairs, asked), str(dict(pairs)[asked]))
    kept = batch.draw["n_lines"]
    assert bool((batch.draw["query"] < kept).all())
    if n_lines <= 3:
        assert bool((kept == n_lines).all())
    else:  # as many as fit: every kept line can be asked within L_MAX, and one more line would not fit
        assert int(kept.max()) < n_lines
        d = batch.draw
        for i in range(6):
            pairs, _ = gen.pairs(batch, i)
            k = len(pairs)
            extra = (f"{gen.adjectives[int(d['adjective'][i, k])]}-{gen.nouns[int(d['noun'][i, k])]}",
                     int(d["value"][i, k]))

            def longest(record):
                return max(len(tok(lines.lines_prompt(record, idx))["input_ids"]) for idx, _ in record)

            assert longest(pairs) <= L_MAX < longest([*pairs, extra])


def test_lines_asks_every_position(gens):
    batch = gens["lines"].sample(2000, 4, gen=torch.Generator().manual_seed(5))
    counts = torch.bincount(batch.draw["query"], minlength=4)
    assert counts.tolist() and int(counts.min()) > 400  # uniform over 4 positions: ~500 each


def test_lines_per_example_line_counts(gens):
    want = torch.tensor([1, 2, 3, 4])
    batch = gens["lines"].sample(4, want, gen=torch.Generator().manual_seed(0))
    assert batch.draw["n_lines"].tolist() == want.tolist()


@pytest.mark.parametrize("seed", [0, 1])
def test_topics_ids_are_the_topics_prompts(tok, gens, seed):
    gen = gens["topics"]
    batch = gen.sample(32, ramp=1.0, gen=torch.Generator().manual_seed(seed))
    firsts = set()
    for i in range(32):
        texts, n = gen.texts(batch, i)
        first = gen.conversations[int(batch.draw["order"][i, 0])]
        assert texts[0] == first.text[: len(texts[0])]
        firsts.add(first.topic)
        _check(tok, batch, i, topics.topics_prompt(texts, n), first.topic)
    assert len(firsts) > 10  # the first topic is drawn, not fixed


def test_a_tokenizer_whose_pieces_merge_is_refused():
    vocab = {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "abc": 5}
    merging = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(BPE(vocab, [("a", "b"), ("ab", "c")],
                                                                     unk_token="<unk>")))
    assert ids_after(merging, "abc", "a") == [1]
    with pytest.raises(ValueError, match="do not compose"):
        ids_after(merging, "ab", "c")


def test_lines_never_repeat_a_word_within_a_record(gens):
    """LongEval draws a record's adjectives and its nouns each without replacement: no word twice in a record."""
    gen = gens["lines"]
    batch = gen.sample(2000, 12, gen=torch.Generator().manual_seed(7))
    for key in ("adjective", "noun"):
        drawn = batch.draw[key]
        assert drawn.shape == (2000, 12)
        ordered = drawn.sort(1).values
        assert not bool((ordered[:, 1:] == ordered[:, :-1]).any()), key
    every = gen.sample(1, gen.max_lines + 50, gen=torch.Generator().manual_seed(0)).draw["adjective"]
    assert every.shape[1] == gen.max_lines == len(gen.adjectives) and len(set(every[0].tolist())) == gen.max_lines
