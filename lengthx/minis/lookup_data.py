"""The lookup stand-in's lines records (docs/mini-t5-lookup.md): LongEval lines records at L_tr
built as text, single-question or multi-query.

* **Single-question** records are the benchmark's (:func:`lengthx.tasks.lines.lines_prompt`, in the recipe's
  format); the target *echoes the asked key* before its number: ``"<idx> is <n>"``. The benchmark scores the last
  integer of the output, so the echo costs nothing at evaluation, and it puts the key in the decoder, where the
  multi-query records train the lookup.
* **Multi-query** records ask for every kept line, in a random order, in one question; the target answers each in
  turn, ``"<idx1> is <n1>. <idx2> is <n2>. …"``: one supervised lookup per line instead of one per record (the
  dense signal of multi-query associative recall; Arora et al. 2023, "Zoology").

Records are drawn from a generator seeded by (seed, step), so a resumed run draws the same records. A record asks
for ``n`` lines and keeps the longest prefix whose prompt fits L_tr.

**Forms** (:data:`FORMS`). ``benchmark`` records have LongEval's keys (an adjective and a noun of the wonderwords
lists, 4-8 pieces in the mini tokenizer) and values (1..50000, two pieces). ``one-piece`` records draw their keys
from the words of those lists that are one token where a key puts them (:func:`one_piece_words`) and their values
from 1..:data:`ONE_PIECE_MAX`, one token each: the lookup without binding pieces, which the lookup stand-in's
variant P learns before the benchmark's form (docs/mini-t5-lookup.md; :mod:`lengthx.minis.curriculum`).
"""

from __future__ import annotations

import random
from functools import lru_cache

import torch
from transformers import PreTrainedTokenizerFast

from lengthx.tasks.lines import (
    FORMATS,
    LINE_TEMPLATE,
    MAX_VALUE,
    QUESTION_TEMPLATE,
    line_index_vocabulary,
    random_line_indices,
)
from lengthx.tasks.lines_records import fill_to, filled_body
from lengthx.tasks.token_ids import IGNORE, IdBatch

FORMS = ("benchmark", "one-piece")
ONE_PIECE_MAX = 999  # values of one token in the mini tokenizer ("<315>" is "<", "315", ">")
MULTI_QUESTION = "\nNow the record is over. Tell me what is the <REGISTER_CONTENT> in lines {idxs}? I need the numbers."


def answer(pairs: list[tuple[str, int]]) -> str:
    """The target naming each asked line's key and number, in the asked order."""
    return ". ".join(f"{idx} is {n}" for idx, n in pairs) + ("." if len(pairs) > 1 else "")


def key_pieces(tok: PreTrainedTokenizerFast, key: str) -> tuple[list[str], list[str]]:
    """The pieces of ``key`` where a record puts it, in its line and in the question (a lone ``"▁"`` before it left
    out): those after the text's last ``line`` piece, up to the ``:`` or ``?`` after the key; an empty list where
    the key runs into that punctuation. A key with a ``line`` piece of its own (``pipe`` ``line``) is cut at it, so
    such a word never passes for one piece in :func:`one_piece_words`."""
    out = []
    for text, end in ((LINE_TEMPLATE.format(idx=key, n=1), ":"), (QUESTION_TEMPLATE.format(idx=key), "?")):
        pieces = tok.tokenize(text)
        start = max(i for i, p in enumerate(pieces) if p.lstrip("▁") == "line") + 1
        out.append([p for p in pieces[start:pieces.index(end, start)] if p != "▁"] if end in pieces[start:] else [])
    return out[0], out[1]


@lru_cache(maxsize=4)
def one_piece_words(tok: PreTrainedTokenizerFast) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The line-index adjectives and nouns (:func:`lengthx.tasks.lines.line_index_vocabulary`) that are one token
    where a key puts them, in its line and in the question: the adjective after ``"line "``, the noun after the
    hyphen (:func:`key_pieces`)."""
    adjectives, nouns = line_index_vocabulary()

    def one(key: str, noun: bool) -> bool:  # one piece before the hyphen (the adjective) or after it (the noun)
        return all("-" in p and (len(p) - p.index("-") - 1 if noun else p.index("-")) == 1
                   for p in key_pieces(tok, key))

    return (tuple(a for a in adjectives if a.isalpha() and one(f"{a}-{nouns[0]}", False)),
            tuple(n for n in nouns if n.isalpha() and one(f"{adjectives[0]}-{n}", True)))


def lookup_record(tok: PreTrainedTokenizerFast, l_tr: int, n_lines: int, multi: bool, rng: random.Random,
                  fmt: str = "short", form: str = "benchmark", fill: bool = False) -> tuple[str, str, int]:
    """(prompt, target, lines kept): a record asking for ``n_lines`` lines in ``form`` (:data:`FORMS`), cut to the
    longest prefix that fits; with ``fill``, its kept lines then padded with filler (:func:`padded`)."""
    if form == "benchmark":
        keys, most = random_line_indices(n_lines, rng), MAX_VALUE
    else:
        adjectives, nouns = one_piece_words(tok)
        keys = [f"{a}-{b}" for a, b in zip(rng.sample(adjectives, n_lines), rng.sample(nouns, n_lines), strict=True)]
        most = ONE_PIECE_MAX
    pairs = [(k, rng.randint(1, most)) for k in keys]
    order = list(range(n_lines))
    rng.shuffle(order)
    query = rng.randrange(n_lines)
    for kept in range(n_lines, 0, -1):
        body = "".join(LINE_TEMPLATE.format(idx=k, n=v) for k, v in pairs[:kept])
        if multi:
            asked = [pairs[i] for i in order if i < kept]
            question = MULTI_QUESTION.format(idxs=", ".join(k for k, _ in asked))
        else:
            asked = [pairs[query % kept]]
            question = QUESTION_TEMPLATE.format(idx=asked[0][0])
        prompt = FORMATS[fmt] + body + question
        size = len(tok(prompt)["input_ids"])
        if size <= l_tr:
            if fill:
                prompt = padded(tok, [LINE_TEMPLATE.format(idx=k, n=v) for k, v in pairs[:kept]],
                                FORMATS[fmt], question, rng.randint(size, l_tr), rng)
            return prompt, answer(asked), kept
    raise ValueError(f"a one-line record does not fit L_tr = {l_tr} tokens")


def padded(tok: PreTrainedTokenizerFast, lines: list[str], header: str, question: str, length: int,
           rng: random.Random) -> str:
    """The record of ``lines`` padded to at most ``length`` tokens with the passkey task's filler sentences, each
    line at a depth drawn uniform and kept in order: the records of ``task.num_lines``
    (:mod:`lengthx.tasks.lines_records`), at a length of the trainer's draw."""
    where = sorted(rng.random() for _ in lines)
    def build(m: int) -> str:
        return header + filled_body(lines, where, m) + question
    return fill_to(build, lambda p: len(tok(p)["input_ids"]), length)[0]


def form_capacity(tok: PreTrainedTokenizerFast, l_tr: int, form: str, fmt: str = "short", draws: int = 20) -> int:
    """The most lines a single-question record of ``form`` holds at ``l_tr`` in every one of ``draws`` seeded
    draws (or as many as its keys allow): the last counted stage of a form the curriculum leaves for the next
    (:mod:`lengthx.minis.curriculum`)."""
    n = 1
    try:
        while all(lookup_record(tok, l_tr, n + 1, False, random.Random(f"capacity:{form}:{n + 1}:{i}"), fmt, form)[2]
                  == n + 1 for i in range(draws)):
            n += 1
    except ValueError:  # more lines than the form has distinct keys for: every count it can draw fits
        pass
    return n


class LookupRecords:
    """Batches of :func:`lookup_record`: ``multi_share`` of them multi-query, the rest single-question; with
    ``fill_share``, each record is padded with filler at that chance (a recipe without it draws the same records
    as before the option existed)."""

    def __init__(self, tok: PreTrainedTokenizerFast, l_tr: int, seed: int, multi_share: float, fmt: str,
                 label_width: int, device: torch.device, fill_share: float = 0.0):
        self.tok, self.l_tr, self.seed, self.multi_share, self.fmt = tok, l_tr, seed, multi_share, fmt
        self.label_width, self.device, self.fill_share = label_width, device, fill_share

    def sample(self, step: int, n_lines: list[int],
               form: str = "benchmark") -> tuple[IdBatch, torch.Tensor, torch.Tensor]:
        """(batch, lines kept per record, whether each record is multi-query) for records asking ``n_lines``, in
        ``form``."""
        rng = random.Random(f"lookup:{self.seed}:{step}")
        n_multi = round(len(n_lines) * self.multi_share)
        prompts, targets, kept = [], [], []
        for i, n in enumerate(n_lines):
            fill = self.fill_share > 0 and rng.random() < self.fill_share
            prompt, target, k = lookup_record(self.tok, self.l_tr, n, i < n_multi, rng, self.fmt, form, fill)
            prompts.append(prompt)
            targets.append(target)
            kept.append(k)
        enc = self.tok(prompts, padding="max_length", max_length=self.l_tr, return_tensors="pt")
        labels = torch.full((len(prompts), self.label_width), IGNORE, dtype=torch.long)
        for i, ids in enumerate(self.tok(targets)["input_ids"]):
            if len(ids) > self.label_width:
                raise ValueError(f"a lookup target of {len(ids)} tokens exceeds the label width {self.label_width}")
            labels[i, : len(ids)] = torch.tensor(ids)
        multi = torch.arange(len(prompts)) < n_multi
        dev = self.device
        return (IdBatch(enc["input_ids"].to(dev), enc["attention_mask"].to(dev), labels.to(dev)),
                torch.tensor(kept, device=dev), multi.to(dev))
