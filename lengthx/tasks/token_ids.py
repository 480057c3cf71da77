"""Retrieval examples built directly as token-id tensors, for training a retrieval mini-T5 on a GPU.

Passkey (:mod:`lengthx.tasks.passkey`), LongEval lines (:mod:`lengthx.tasks.lines`) and LongEval topics
(:mod:`lengthx.tasks.topics`) prompts are concatenations of fixed text and a few drawn parts (keys, line
indices, values, filler cuts, conversations). With a tokenizer whose pre-tokenizer splits at spaces,
newlines, punctuation and digit groups (``lengthx.data.tokenizers.train_tokenizer``), every part tokenizes
the same wherever it stands, so a prompt's ids are the concatenation of the parts' ids. Each generator
tokenizes every part once (every key and value 1..50000, every filler cut, every adjective and noun,
every conversation), then draws a whole batch with tensor operations (on the device of its tables) and
assembles it by one scatter: no text, no tokenizer call, no Python loop per example.

Every part is checked when the tables are built (:func:`ids_after`), and a batch returns its draw, so
``tests/test_token_ids.py`` rebuilds the text of each example with the task module's own prompt function
and compares the tokenizer's ids with the generated ones. A tokenizer for which the parts do not compose
(e.g. SentencePiece models that merge across spaces) is refused with ``ValueError`` at construction.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from lengthx.tasks import lines, passkey, topics

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

PAD_ID = -1  # an empty slot before compaction; never a token id
IGNORE = -100  # label padding, ignored by the cross-entropy


@dataclass
class IdBatch:
    """A training batch: right-padded encoder inputs, decoder labels (``-100`` padded) and the draw."""

    input_ids: torch.Tensor  # (B, l_max) long, pad 0
    attention_mask: torch.Tensor  # (B, l_max) long
    labels: torch.Tensor  # (B, T) long, IGNORE-padded; the answer's ids and </s>
    draw: dict[str, torch.Tensor] = field(default_factory=dict)  # what was drawn, per example

    def to(self, device: torch.device | str) -> IdBatch:
        """The batch on ``device``."""
        return IdBatch(self.input_ids.to(device), self.attention_mask.to(device), self.labels.to(device),
                       {k: v.to(device) for k, v in self.draw.items()})


def ids_after(tokenizer: PreTrainedTokenizerBase, context: str, text: str) -> list[int]:
    """The ids of ``text`` as it tokenizes right after ``context`` (no special tokens).

    Raises ``ValueError`` unless ``context`` alone tokenizes to a prefix of ``context + text``, i.e. unless
    a pre-token boundary separates them (then ``text``'s ids do not depend on what precedes it)."""
    return ids_after_each(tokenizer, context, [text])[0]


def ids_after_each(tokenizer: PreTrainedTokenizerBase, context: str, texts: list[str]) -> list[list[int]]:
    """:func:`ids_after` for many texts after one context, in one batched tokenizer call."""
    head = tokenizer(context, add_special_tokens=False)["input_ids"]
    out = []
    for text, both in zip(texts, tokenizer([context + t for t in texts], add_special_tokens=False)["input_ids"],
                          strict=True):
        if both[: len(head)] != head:
            raise ValueError(f"the tokenizer merges {context[-20:]!r} with {text[:20]!r}: its pieces do not "
                             "compose, so prompts cannot be assembled from token ids")
        out.append(both[len(head):])
    return out


def _table(rows: list[list[int]], device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ids as one ``PAD_ID``-padded (N, W) tensor, and their lengths."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    width = max(1, int(lengths.max()))
    out = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    out[torch.arange(width)[None] < lengths[:, None]] = torch.tensor([t for r in rows for t in r], dtype=torch.long)
    return out.to(device), lengths.to(device)


def _fixed(ids: list[int], batch: int, device: torch.device | str) -> torch.Tensor:
    return torch.tensor(ids, dtype=torch.long, device=device).expand(batch, len(ids))


def compact(parts: list[torch.Tensor], width: int, pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate (B, w_i) parts, drop the ``PAD_ID`` slots, right-pad to ``width`` with ``pad``.

    Returns (ids, lengths). Raises ``ValueError`` if a row is longer than ``width``."""
    row = torch.cat(parts, dim=1)
    keep = row != PAD_ID
    lengths = keep.sum(1)
    if int(lengths.max()) > width:
        raise ValueError(f"an assembled example has {int(lengths.max())} tokens > {width}")
    pos = torch.where(keep, keep.cumsum(1) - 1, width)  # dropped slots go to a spare column
    out = torch.full((row.shape[0], width + 1), pad, dtype=row.dtype, device=row.device)
    out.scatter_(1, pos, torch.where(keep, row, pad))
    return out[:, :width], lengths


def _answers(tokenizer: PreTrainedTokenizerBase, texts: list[str], device: torch.device | str) -> torch.Tensor:
    """Decoder labels of each answer text (its ids and </s>, as ``tokenizer(text)`` gives), IGNORE-padded."""
    ids, _ = _table(tokenizer(texts)["input_ids"], device)
    return ids.masked_fill(ids == PAD_ID, IGNORE)


def _uniform_int(low: torch.Tensor, high: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    """One integer uniform in [low, high] (inclusive) per element."""
    u = torch.rand(low.shape, generator=gen, device=low.device)
    return low + (u * (high - low + 1).to(u.dtype)).long().clamp(max=high - low)


class PasskeyIds:
    """Passkey prompts (:func:`lengthx.tasks.passkey.passkey_prompt`) of at most ``l_max`` tokens, as ids.

    The draw is upstream's: a key uniform in 1..50000, ``n_garbage`` filler characters uniform in
    0..``max_garbage·ramp``, the key sentence after a prefix of ``prefix_chars`` uniform in 0..n_garbage.
    ``max_garbage`` is the largest filler for which every key and every prefix fit ``l_max``."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, l_max: int, device: torch.device | str = "cpu"):
        self.l_max, self.device = l_max, device
        a, b, c = passkey.KEY_LINE.split("{key}")
        nl = "\n"
        self.intro = ids_after(tokenizer, "", passkey.INTRO + nl)
        self.key_a = ids_after(tokenizer, nl, a.rstrip())  # "The pass key is"; the space goes with the key
        self.key_b = ids_after(tokenizer, "1", b.rstrip())  # ". Remember it."
        self.key_c = ids_after(tokenizer, "1", c + nl)  # " is the pass key.\n"
        self.question = ids_after(tokenizer, nl, nl + passkey.QUESTION)
        self.eos = tokenizer("")["input_ids"]
        keys = range(passkey.MAX_KEY + 1)
        self.keys, self.key_len = _table(ids_after_each(tokenizer, "is", [f" {k}" for k in keys]), device)
        self.answers = _answers(tokenizer, [str(k) for k in keys], device)
        fixed = len(self.intro) + len(self.key_a) + len(self.key_b) + len(self.key_c) + len(self.question) \
            + len(self.eos) + 1 + 2 * int(self.key_len[1:].max())  # + the newline after the prefix
        budget = l_max - fixed
        if budget < 0:
            raise ValueError(f"l_max={l_max} leaves no room for the passkey prompt")
        n_chars = max(budget, 1)
        while len(ids_after(tokenizer, nl, passkey.filler(n_chars))) <= budget:  # no cut this long can fit
            n_chars *= 2
        rows = ids_after_each(tokenizer, nl, [passkey.filler(k) for k in range(n_chars + 1)])
        self.filler, self.filler_len = _table(rows, device)
        lens = self.filler_len.cpu()
        # the longest filler whose every split into prefix and suffix fits, for this and every shorter filler
        self.max_garbage = next(g for g in range(n_chars + 1)
                                if int((lens[: g + 1] + lens[: g + 1].flip(0)).max()) > budget) - 1

    def sample(self, batch: int, ramp: float = 1.0, gen: torch.Generator | None = None) -> IdBatch:
        """``batch`` prompts; the filler is drawn up to ``ramp`` (0..1) of ``max_garbage`` characters."""
        dev, zero = self.device, torch.zeros(batch, dtype=torch.long, device=self.device)
        key = _uniform_int(zero + 1, zero + passkey.MAX_KEY, gen)
        n_garbage = _uniform_int(zero, zero + int(round(self.max_garbage * min(max(ramp, 0.0), 1.0))), gen)
        prefix = _uniform_int(zero, n_garbage, gen)
        nl = self.question[:1]  # the question part starts with the newline token
        parts = [_fixed(self.intro, batch, dev), self.filler[prefix], _fixed(nl, batch, dev),
                 _fixed(self.key_a, batch, dev), self.keys[key], _fixed(self.key_b, batch, dev), self.keys[key],
                 _fixed(self.key_c, batch, dev), self.filler[n_garbage - prefix], _fixed(self.question, batch, dev),
                 _fixed(self.eos, batch, dev)]
        ids, lengths = compact(parts, self.l_max)
        return IdBatch(ids, _mask(lengths, self.l_max), self.answers[key],
                       {"key": key, "n_garbage": n_garbage, "prefix_chars": prefix, "length": lengths})


class LinesIds:
    """LongEval lines prompts (:func:`lengthx.tasks.lines.lines_prompt`) of at most ``l_max`` tokens, as ids.

    The draw is LongEval's: adjective-noun indices from :func:`lengthx.tasks.lines.line_index_vocabulary` with no
    adjective and no noun repeated within a record, values uniform in 1..50000, the asked line uniform among the record's lines. ``sample`` asks for a number
    of lines per example and keeps the longest prefix of them that fits ``l_max`` tokens."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, l_max: int, device: torch.device | str = "cpu",
                 fmt: str = "longeval"):
        self.l_max, self.device = l_max, device
        self.adjectives, self.nouns = lines.line_index_vocabulary()
        before, after = lines.QUESTION_TEMPLATE.split("{idx}")
        line_head, line_tail = lines.LINE_TEMPLATE.split("{idx}")
        mid, end = line_tail.split("{n}")
        self.header = ids_after(tokenizer, "", lines.FORMATS[fmt])
        self.line = ids_after(tokenizer, "\n", line_head.rstrip())  # "line"; the space goes with the index
        self.dash = ids_after(tokenizer, "a", "-")
        self.mid = ids_after(tokenizer, "a", mid.rstrip("<"))  # ": REGISTER_CONTENT is "
        self.angle = ids_after(tokenizer, " ", "<")
        self.end = ids_after(tokenizer, "1", end)  # ">\n"
        self.q_before = ids_after(tokenizer, "\n", before.rstrip())  # "\nNow ... in line"
        self.q_after = ids_after(tokenizer, "a", after) + tokenizer("")["input_ids"]  # "? I need the number.</s>"
        self.adj, self.adj_len = _table(ids_after_each(tokenizer, "line", [f" {w}" for w in self.adjectives]), device)
        self.noun, self.noun_len = _table(ids_after_each(tokenizer, "a-", list(self.nouns)), device)
        values = range(lines.MAX_VALUE + 1)
        self.values, self.value_len = _table(ids_after_each(tokenizer, "<", [str(n) for n in values]), device)
        self.answers = _answers(tokenizer, [str(n) for n in values], device)
        self.line_fixed = len(self.line) + len(self.dash) + len(self.mid) + len(self.angle) + len(self.end)
        self.q_fixed = len(self.q_before) + len(self.dash) + len(self.q_after)

    @property
    def max_lines(self) -> int:
        """The most lines a record can have without repeating a word: the smaller of the two word lists."""
        return min(len(self.adjectives), len(self.nouns))

    def capacity(self) -> int:
        """An upper bound on the lines that fit ``l_max`` (every line at its shortest), at most :attr:`max_lines`."""
        shortest = self.line_fixed + int(self.adj_len.min()) + int(self.noun_len.min()) + 1
        return min(self.max_lines, max(1, (self.l_max - len(self.header) - self.q_fixed) // shortest))

    def _distinct_indices(self, batch: int, n: int, gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(adjective, noun) ids of ``n`` lines per record, each word drawn without replacement within its record
        (LongEval's ``generate_line_index``): the first ``n`` of a random permutation of each list."""
        n_adj, n_noun = len(self.adjectives), len(self.nouns)
        if n > min(n_adj, n_noun):
            raise ValueError(f"a record of {n} lines needs {n} distinct adjectives and nouns; the vocabulary has "
                             f"{n_adj} adjectives and {n_noun} nouns")
        adj = torch.rand(batch, n_adj, generator=gen, device=self.device).argsort(1)[:, :n]
        noun = torch.rand(batch, n_noun, generator=gen, device=self.device).argsort(1)[:, :n]
        return adj, noun

    def sample(self, batch: int, n_lines: torch.Tensor | int, gen: torch.Generator | None = None) -> IdBatch:
        """``batch`` records of (up to) ``n_lines`` lines each (an int or one per example)."""
        dev = self.device
        n_req = torch.as_tensor(n_lines, device=dev).expand(batch).clamp(min=1, max=self.max_lines)
        width = int(n_req.max())
        adj, noun = self._distinct_indices(batch, width, gen)
        value = torch.randint(1, lines.MAX_VALUE + 1, (batch, width), generator=gen, device=dev)
        line_len = self.line_fixed + self.adj_len[adj] + self.noun_len[noun] + self.value_len[value]
        q_len = self.q_fixed + self.adj_len[adj] + self.noun_len[noun]
        total = len(self.header) + line_len.cumsum(1) + q_len.cummax(1).values
        wanted = torch.arange(width, device=dev) < n_req[:, None]
        kept = ((total <= self.l_max) & wanted).sum(1)
        if int(kept.min()) == 0:
            raise ValueError(f"l_max={self.l_max} cannot hold a one-line record")
        query = _uniform_int(torch.zeros_like(kept), kept - 1, gen)
        on = (torch.arange(width, device=dev) < kept[:, None])[:, :, None]

        cells = [_fixed(self.line, 1, dev)[None], self.adj[adj], _fixed(self.dash, 1, dev)[None], self.noun[noun],
                 _fixed(self.mid + self.angle, 1, dev)[None], self.values[value], _fixed(self.end, 1, dev)[None]]
        rows = torch.cat([c.expand(batch, width, -1) for c in cells], dim=2).masked_fill(~on, PAD_ID).flatten(1)
        pick = torch.arange(batch, device=dev)
        parts = [_fixed(self.header, batch, dev), rows, _fixed(self.q_before, batch, dev), self.adj[adj[pick, query]],
                 _fixed(self.dash, batch, dev), self.noun[noun[pick, query]], _fixed(self.q_after, batch, dev)]
        ids, lengths = compact(parts, self.l_max)
        return IdBatch(ids, _mask(lengths, self.l_max), self.answers[value[pick, query]],
                       {"adjective": adj, "noun": noun, "value": value, "n_lines": kept, "query": query,
                        "length": lengths})

    def pairs(self, batch: IdBatch, i: int) -> tuple[list[tuple[str, int]], str]:
        """Example ``i``'s (line index, value) pairs and asked index, as :mod:`lengthx.tasks.lines` spells them."""
        d = {k: v[i].tolist() for k, v in batch.draw.items()}
        idx = [f"{self.adjectives[a]}-{self.nouns[n]}" for a, n in zip(d["adjective"], d["noun"], strict=True)]
        pairs = list(zip(idx, d["value"], strict=True))[: d["n_lines"]]
        return pairs, pairs[d["query"]][0]


_WORD_START = "\u2581"  # a piece that starts a word (the tokenizer's space marker)


class TopicsIds:
    """LongEval topics records (:func:`lengthx.tasks.topics.topics_prompt`) of at most ``l_max`` tokens, as ids.

    The draw is the topics task's: the conversations in a random order (drawn without replacement), the record
    cut at a word boundary (here: after a random number of tokens up to what fits, rounded down to a word end),
    the header's N counting the conversations the record touches; the answer is the first topic."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, l_max: int, device: torch.device | str = "cpu",
                 conversations: tuple[topics.Conversation, ...] | None = None):
        self.l_max, self.device = l_max, device
        self.conversations = conversations or topics.generate_conversations()
        if any(not re.match(r"\w", c.text) or re.search(r"\w$", c.text) for c in self.conversations):
            raise ValueError("conversations must start with a word and end with punctuation to be joined as ids")
        head, tail = topics.HEADER.split("{n}")
        self.head = ids_after(tokenizer, "", head.rstrip())
        self.tail = ids_after(tokenizer, "1", tail.rstrip())  # "... Now the record start."
        self.closing = ids_after(tokenizer, "a", topics.CLOSING) + tokenizer("")["input_ids"]
        texts = [c.text for c in self.conversations]
        first = ids_after_each(tokenizer, ".", [" " + t for t in texts])  # after the header's full stop
        later = ids_after_each(tokenizer, ".", texts)  # right after the previous conversation
        self.first, self.first_len = _table(first, device)
        self.later, self.later_len = _table(later, device)
        self.first_ends = self._word_ends(tokenizer, first, device)
        self.later_ends = self._word_ends(tokenizer, later, device)
        self.answers = _answers(tokenizer, [c.topic for c in self.conversations], device)
        count_len = len(ids_after(tokenizer, "on", " 1"))
        self.fixed = len(self.head) + count_len + len(self.tail) + len(self.closing)
        shortest = int(self.later_len.min())
        self.max_conversations = min(len(texts), 1 + math.ceil(max(0, l_max - self.fixed) / shortest))
        counts = [f" {n}" for n in range(self.max_conversations + 1)]  # every N a record of l_max can hold
        self.n_ids, n_len = _table(ids_after_each(tokenizer, "on", counts), device)
        if int(n_len.min()) != count_len or int(n_len.max()) != count_len:
            raise ValueError("the header's topic count must have one token length for every count")

    @staticmethod
    def _word_ends(tokenizer: PreTrainedTokenizerBase, rows: list[list[int]], device: torch.device | str) -> torch.Tensor:
        """Per conversation and token position t: whether the text may be cut after token t (the next piece
        starts a word, or the conversation ends there)."""
        flags = []
        for r in rows:
            pieces = tokenizer.convert_ids_to_tokens(r)
            flags.append([int(t + 1 == len(r) or pieces[t + 1].startswith(_WORD_START)) for t in range(len(r))])
        table, _ = _table(flags, device)
        return table.clamp(min=0).bool()

    def sample(self, batch: int, ramp: float = 1.0, gen: torch.Generator | None = None) -> IdBatch:
        """``batch`` records; each keeps up to a random number of record tokens, at most ``ramp`` of what fits."""
        dev, m = self.device, self.max_conversations
        order = torch.rand(batch, len(self.conversations), generator=gen, device=dev).argsort(1)[:, :m]
        conv = [self.first[order[:, 0]]] + [self.later[order[:, j]] for j in range(1, m)]
        ends = [self.first_ends[order[:, 0]]] + [self.later_ends[order[:, j]] for j in range(1, m)]
        which = [torch.full_like(c, j) for j, c in enumerate(conv)]
        room = self.l_max - self.fixed
        record, length = compact(conv, sum(c.shape[1] for c in conv), pad=PAD_ID)
        cut_ok, _ = compact([torch.where(c == PAD_ID, PAD_ID, e.long()) for c, e in zip(conv, ends, strict=True)],
                            record.shape[1], pad=0)
        conv_of, _ = compact([torch.where(c == PAD_ID, PAD_ID, w) for c, w in zip(conv, which, strict=True)],
                             record.shape[1], pad=PAD_ID)
        zero = torch.zeros(batch, dtype=torch.long, device=dev)
        limit = torch.minimum(length, zero + room)
        first_word = cut_ok.long().argmax(1) + 1  # tokens up to the end of the first word
        if bool((first_word > limit).any()):
            raise ValueError(f"l_max={self.l_max} cannot hold the first word of a conversation")
        top = torch.maximum(first_word, (limit.float() * min(max(ramp, 0.0), 1.0)).long())
        want = _uniform_int(first_word, top, gen)
        pos = torch.arange(record.shape[1], device=dev)
        allowed = cut_ok.bool() & (pos[None] < want[:, None])
        cut = torch.where(allowed, pos[None], -1).max(1).values + 1  # tokens kept
        n_topics = conv_of.gather(1, (cut - 1)[:, None])[:, 0] + 1
        in_last = (conv_of == (n_topics - 1)[:, None]) & (pos[None] < cut[:, None])
        words_in_last = (cut_ok.bool() & in_last).sum(1)
        kept = record.masked_fill(pos[None] >= cut[:, None], PAD_ID)
        parts = [_fixed(self.head, batch, dev), self.n_ids[n_topics], _fixed(self.tail, batch, dev), kept,
                 _fixed(self.closing, batch, dev)]
        ids, lengths = compact(parts, self.l_max)
        return IdBatch(ids, _mask(lengths, self.l_max), self.answers[order[:, 0]],
                       {"order": order, "n_topics": n_topics, "words_in_last": words_in_last, "length": lengths})

    def texts(self, batch: IdBatch, i: int) -> tuple[list[str], int]:
        """Example ``i``'s conversation texts (the last one cut after its kept words) and the header's N."""
        order, n = batch.draw["order"][i].tolist(), int(batch.draw["n_topics"][i])
        texts = [self.conversations[j].text for j in order[:n]]
        words = list(re.finditer(r"\S+", texts[-1]))
        texts[-1] = texts[-1][: words[int(batch.draw["words_in_last"][i]) - 1].end()]
        return texts, n


def _mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    return (torch.arange(width, device=lengths.device)[None] < lengths[:, None]).long()
