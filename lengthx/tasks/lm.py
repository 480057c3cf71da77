"""Language modelling with T5-LM (paper A §5.1 / Table 3): perplexity of a continuation given a long context.

Benchmark facts (paper A, docs/design.md §6): the LM-adapted T5 models (L_tr = 512) read L_ex = 1024, 2048, 4096,
8192 or 15000 tokens of a long document with the encoder; Table 3 reports the average perplexity of 500
sequences ("lower is better", ">1k" above 1000). The paper does not state the corpus or the decoder length;
lengthx takes PG19's test split as the default corpus in the paper profile, and we score a continuation of
``continuation_tokens`` = 128 tokens by default (``task.continuation_tokens``): long enough for a stable
per-sequence perplexity, and close to the ~114-token targets T5's LM adaptation was trained with.

An example is a split point in a document: ``prompt`` = the L_ex tokens before it (T5's ``</s>`` included,
so the encoder reads exactly L_ex tokens), ``target`` = the text of the next ``continuation_tokens`` tokens
(no special tokens; the decoder is not asked to predict ``</s>`` inside running text). Split points are at
word boundaries, seeded per example; example i reads document i mod D of a seeded document order (D
documents long enough), so 500 sequences spread over PG19's 100 test books.

This task scores by likelihood, not generation: :meth:`LMTask.evaluate` returns per-example scores
``perplexity`` (exp of the mean token NLL) and ``nll`` (mean token NLL). The runner's mean of
``perplexity`` is Table 3's "average perplexity of N sequences"; exp(mean ``nll``) is the token-weighted
perplexity (all continuations have the same length). Decoder-only models are supported too (the
continuation is scored after the prompt), an extension beyond the paper.

Corpora (``task.source``): ``hf`` = ``datasets.load_dataset(task.hf_dataset, split=task.hf_split)``
(default ``deepmind/pg19``, test split, field ``text``); ``text`` = ``task.text_path`` (a UTF-8 file, or a
directory of ``*.txt`` files, one document each); ``stdlib`` = the standard library's sources (mini).
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthx.data.corpora import stdlib_split
from lengthx.data.fitting import (
    chars_per_token,
    count_tokens,
    largest_fitting,
    prefix_with_tokens,
    suffix_with_tokens,
)
from lengthx.data.hub import load_hub_dataset
from lengthx.data.provenance import file_label, hub_label, stdlib_label
from lengthx.tasks.base import Example, Setting, Task, hub_problem, missing_path

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

PG19 = "deepmind/pg19"
CONTINUATION_TOKENS = 128
_SPACE = re.compile(r"\s+")


def read_text_documents(path: str | Path) -> list[tuple[str, str]]:
    """(name, text) documents from a UTF-8 file or a directory of ``*.txt`` files."""
    path = Path(path)
    if path.is_file():
        return [(path.name, path.read_text(encoding="utf-8"))]
    if path.is_dir():
        docs = [(p.name, p.read_text(encoding="utf-8")) for p in sorted(path.rglob("*.txt"))]
        if docs:
            return docs
        raise FileNotFoundError(f"task.text_path={path} holds no *.txt files")
    raise FileNotFoundError(f"task.text_path={path} does not exist")


def load_hf_documents(name: str = PG19, split: str = "test", field: str = "text") -> list[tuple[str, str]]:
    """(title or index, text) documents of a Hugging Face dataset via ``datasets`` (PG19 by default)."""
    ds = load_hub_dataset(name, split, (field,),
                          hint="Set task.hf_dataset to a PG19 copy that 'datasets' can load, or task.source=text "
                               "task.text_path=FILE_OR_DIR, or task.source=stdlib")
    title = "short_book_title" if "short_book_title" in ds.column_names else None
    return [(str(r[title]) if title else f"{name}:{i}", r[field]) for i, r in enumerate(ds)]


class LMTask(Task):
    """T5-LM perplexity: L_ex encoder tokens of a long document, the decoder scores the continuation."""

    name = "lm"
    metrics = ("perplexity", "nll")
    units = ("tokens",)  # what task.unit may name (the unit of explicit task.settings)
    paper_data = f"PG19's test books ({PG19} on the Hugging Face hub)"
    stand_in = {"stdlib": "the Python standard library's own source (held-out files)"}
    scoring = "likelihood"  # the runner calls evaluate() instead of generate() + score()

    def __init__(self, max_new_tokens: int = 0, source: str = "auto", text_path: str | None = None,
                 hf_dataset: str = PG19, hf_split: str = "test", continuation_tokens: int = CONTINUATION_TOKENS,
                 profile: str = "mini", batch_size: int = 1, stdlib_split: str = "all", same_text: bool = False):
        self.max_new_tokens = max_new_tokens  # unused: nothing is generated
        valid = ("auto", "hf", "text", "stdlib")
        if source not in valid:
            raise ValueError(f"unknown task.source={source!r}; valid: {', '.join(valid)}")
        if source == "auto":
            source = "text" if text_path else ("hf" if profile == "paper" else "stdlib")
        self.source, self.text_path, self.hf_dataset, self.hf_split = source, text_path, hf_dataset, hf_split
        self.continuation_tokens = int(continuation_tokens)
        self.batch_size = int(batch_size)
        self.stdlib_split, self.same_text = stdlib_split, bool(same_text)
        self.longest: int | None = None  # same_text: the sweep's longest context (set by the runner)
        self._docs: list[tuple[str, str]] | None = None

    @classmethod
    def from_config(cls, task_cfg: Any, profile: str = "mini") -> LMTask:
        """The task from its Hydra config (``conf/task/lm.yaml``)."""
        return cls(max_new_tokens=int(task_cfg.get("max_new_tokens", 0) or 0),
                   source=task_cfg.get("source", "auto"), text_path=task_cfg.get("text_path"),
                   hf_dataset=task_cfg.get("hf_dataset", PG19), hf_split=task_cfg.get("hf_split", "test"),
                   continuation_tokens=int(task_cfg.get("continuation_tokens", CONTINUATION_TOKENS)),
                   profile=profile, stdlib_split=str(task_cfg.get("stdlib_split", "all")),
                   same_text=bool(task_cfg.get("same_text", False)))

    @staticmethod
    def data_problem(task_cfg: Any, profile: str, settings: list[Setting] | None = None) -> str | None:
        """Why this config cannot read its corpus, or ``None`` (a missing text path; the hub dataset offline
        and not cached). The standard library is always there."""
        source, path = task_cfg.get("source", "auto"), task_cfg.get("text_path")
        if source == "auto":
            source = "text" if path else ("hf" if profile == "paper" else "stdlib")
        if source == "text":
            if not path:
                return "task.source=text needs task.text_path=FILE_OR_DIR (UTF-8 text, one document per *.txt)"
            return missing_path("task.text_path", path, "a UTF-8 text file or a directory of *.txt documents")
        if source == "hf":
            return hub_problem("lm", str(task_cfg.get("hf_dataset", PG19)), str(task_cfg.get("hf_split", "test")),
                               "pass task.text_path=FILE_OR_DIR (e.g. PG19's test books as *.txt files)")
        return None

    def data_source(self, setting: Setting) -> str:
        """The corpus: a text file or directory (name and hash), hub dataset and split, or stdlib split."""
        if self.source == "text":
            return file_label(self.text_path, "*.txt") if self.text_path else ""
        if self.source == "hf":
            return hub_label(self.hf_dataset, self.hf_split)
        return stdlib_label(self.stdlib_split)

    def documents(self) -> list[tuple[str, str]]:
        """The corpus: (name, text) per document."""
        if self._docs is None:
            if self.source == "text":
                if not self.text_path:
                    raise ValueError("task.source=text needs task.text_path=FILE_OR_DIR")
                self._docs = read_text_documents(self.text_path)
            elif self.source == "hf":
                self._docs = load_hf_documents(self.hf_dataset, self.hf_split)
            else:
                self._docs = list(stdlib_split(self.stdlib_split))
        return self._docs

    # ---- examples --------------------------------------------------------------------------------------
    def _split_range(self, tokenizer, text: str, l_ex: int) -> tuple[int, int] | None:
        """Character range of valid split points: ≥ l_ex tokens before, ≥ the continuation after."""
        guess = int(l_ex * chars_per_token(tokenizer, text[:4000]))
        # shortest prefix with more than l_ex tokens: the longest prefix with ≤ l_ex tokens, plus one char
        lo = largest_fitting(lambda k: count_tokens(tokenizer, text[:k]) <= l_ex, len(text), guess) + 1
        guess_c = int((self.continuation_tokens + 1) * chars_per_token(tokenizer, text[-4000:]))
        k = largest_fitting(lambda k: len(tokenizer(text[len(text) - k:], add_special_tokens=False)["input_ids"])
                            <= self.continuation_tokens, len(text), guess_c)
        hi = len(text) - k - 1
        return (lo, hi) if lo <= hi else None

    def examples(self, setting: Setting, tokenizer: PreTrainedTokenizerBase, n: int, seed: int) -> list[Example]:
        """``n`` sequences with ``setting.value`` encoder tokens each (unit ``tokens``).

        With ``same_text`` the split points are drawn for the sweep's longest context (``self.longest``), so
        example i scores the same continuation at every length and the encoder reads the last L_ex tokens
        before it: a row's change across lengths is the length's effect alone."""
        if setting.unit != "tokens":
            raise ValueError(f"lm settings are in tokens, not {setting.unit!r}")
        l_ex, docs = setting.value, self.documents()
        span = max(l_ex, self.longest or 0) if self.same_text else l_ex
        order = list(range(len(docs)))
        random.Random(f"lm:{seed}").shuffle(order)
        ranges: dict[int, tuple[int, int] | None] = {}
        usable: list[int] = []
        out = []
        cursor = 0
        for i in range(n):
            rng = random.Random(f"lm:{seed}:{i}")
            # example i: the (i mod D)-th document long enough for l_ex + continuation
            while len(usable) <= i and cursor < len(order):
                d = order[cursor]
                cursor += 1
                ranges[d] = self._split_range(tokenizer, docs[d][1], span)
                if ranges[d] is not None:
                    usable.append(d)
            if not usable:
                raise ValueError(f"no document of the {self.source} corpus has {span} + "
                                 f"{self.continuation_tokens} tokens")
            d = usable[i % len(usable)]
            name, text = docs[d]
            lo, hi = ranges[d]  # type: ignore[misc]
            split = self._word_boundary(text, rng.randint(lo, hi), lo, hi)
            prompt = suffix_with_tokens(tokenizer, text[:split], l_ex)
            target = prefix_with_tokens(tokenizer, text[split:], self.continuation_tokens)
            n_cont = len(tokenizer(target, add_special_tokens=False)["input_ids"])
            out.append(Example(f"{seed}-{i}", prompt, target, l_ex, count_tokens(tokenizer, prompt),
                               {"document": name, "split_char": split, "continuation_tokens": n_cont}))
        return out

    @staticmethod
    def _word_boundary(text: str, pos: int, lo: int, hi: int) -> int:
        """The start of the word at or after ``pos`` (the continuation starts with a whole word), kept in
        ``[lo, hi]``; ``pos`` itself when no boundary lies in range."""
        m = _SPACE.search(text, pos, hi + 1)
        if m and m.end() <= hi:
            return m.end()
        ends = [b.end() for b in _SPACE.finditer(text, lo, pos)]
        return ends[-1] if ends else pos

    # ---- likelihood ------------------------------------------------------------------------------------
    def evaluate(self, loaded: Any, examples: list[Example], batch_size: int | None = None) -> list[dict[str, float]]:
        """Per-example ``{"perplexity", "nll", "tokens"}`` of the continuation under ``loaded.model``.

        Encoder-decoder: the encoder reads the prompt, the decoder is teacher-forced on the continuation
        (labels; T5 shifts them right after its start token). Decoder-only: prompt and continuation are
        concatenated and only the continuation's tokens are scored. Batches are right-padded; padding
        never counts. Temperature methods apply as for generation (the runner sets τ before calling).
        """
        bs = max(1, int(batch_size or self.batch_size))
        out: list[dict[str, float]] = []
        for start in range(0, len(examples), bs):
            out += self._evaluate_batch(loaded, examples[start:start + bs])
        return out

    def _evaluate_batch(self, loaded: Any, batch: list[Example]) -> list[dict[str, float]]:
        import torch  # here, not at import: reading results (lengthx tables) needs the task classes, not torch

        tok, model, device = loaded.tokenizer, loaded.model, loaded.device
        pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        prompts = [tok(e.prompt, add_special_tokens=True)["input_ids"] for e in batch]
        conts = [tok(str(e.target), add_special_tokens=False)["input_ids"] for e in batch]
        if any(not c for c in conts):
            raise ValueError("an lm example has an empty continuation")
        with torch.no_grad():
            if loaded.family.encoder_decoder:
                ids, mask = _pad(prompts, pad)
                labels, _ = _pad(conts, -100)
                logits = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                               labels=labels.to(device)).logits
                targets = labels.to(device)
            else:
                seqs = [p + c for p, c in zip(prompts, conts, strict=True)]
                ids, mask = _pad(seqs, pad)
                logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[:, :-1]
                targets = torch.full(ids.shape, -100, dtype=torch.long)
                for b, (p, c) in enumerate(zip(prompts, conts, strict=True)):
                    targets[b, len(p):len(p) + len(c)] = torch.tensor(c)
                targets = targets[:, 1:].to(device)
            logp = torch.log_softmax(logits.float(), dim=-1)
            valid = targets != -100
            picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            nll_sum = -(picked * valid).sum(-1)
            count = valid.sum(-1)
        res = []
        for s, c in zip(nll_sum.tolist(), count.tolist(), strict=True):
            nll = s / c
            res.append({"perplexity": math.exp(min(nll, 700.0)), "nll": nll, "tokens": float(c)})
        return res

    def score(self, output: str, example: Example) -> dict[str, float]:
        """Not used: this task is scored by :meth:`evaluate` (likelihood), never from generated text."""
        raise TypeError("the lm task is scored by likelihood: call LMTask.evaluate(loaded, examples)")


def _pad(seqs: list[list[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists to a (B, T) tensor, with the (B, T) attention mask."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), value, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[b, :len(s)] = 1
    return ids, mask
