"""The retrieval stand-in's batches (docs/mini-t5-study.md): passkey, LongEval lines and topics prompts in fixed
shares (paper A §5.2 names the tasks); the lines curriculum that sets their line counts is
:mod:`lengthx.minis.curriculum`.

Examples are built as token-id tensors on the training device (:mod:`lengthx.tasks.token_ids`): the exact
prompts of :mod:`lengthx.tasks.passkey` / ``lines`` / ``topics`` for draws made with tensor operations, no text
and no tokenizer in the loop. With ``topics_records="counts"`` the topics share is instead built as text records
of 1..K conversations (:meth:`lengthx.tasks.topics.TopicsTask.training_record`), drawn from a generator seeded by
(seed, step).
"""

from __future__ import annotations

import argparse
import random

import torch
from transformers import PreTrainedTokenizerFast

from lengthx.minis.lookup_data import LookupRecords
from lengthx.tasks.token_ids import IGNORE, IdBatch, LinesIds, PasskeyIds, TopicsIds
from lengthx.tasks.topics import TopicsTask, generate_conversations

TASKS = ("passkey", "lines", "topics")


class Mixture:
    """One training batch: fixed shares of passkey, lines (at the curriculum's line counts) and topics."""

    def __init__(self, tok: PreTrainedTokenizerFast, args: argparse.Namespace, device: torch.device):
        self.gens = {"passkey": PasskeyIds(tok, args.l_tr, device), "lines": LinesIds(tok, args.l_tr, device, getattr(args, "lines_format", "longeval")),
                     "topics": TopicsIds(tok, args.l_tr, device)}
        shares = {"passkey": args.w_passkey, "lines": args.w_lines, "topics": args.w_topics}
        total = sum(shares.values())
        self.sizes = {t: round(args.batch_size * w / total) for t, w in shares.items() if w > 0}
        self.label_width = max(int((g.answers != IGNORE).sum(1).max()) for g in self.gens.values())
        self.ramp_steps = args.ramp_steps
        self.device = device
        self.counts = args.topics_records == "counts"  # topics records of 1..k_max conversations, built as text
        self.lookup = None  # lines records built as text (lengthx.minis.lookup_data), with --lines-records lookup
        if getattr(args, "lines_records", "ids") == "lookup" and "lines" in self.sizes:
            self.label_width = max(self.label_width, args.lookup_label_width)
            self.lookup = LookupRecords(tok, args.l_tr, args.seed, args.lines_multi, args.lines_format,
                                        self.label_width, device, getattr(args, "lines_fill", 0.0))
        if self.counts:
            self.tok, self.l_tr, self.k_max, self.seed = tok, args.l_tr, args.topics_k_max, args.seed
            self.topics = TopicsTask(prompt_format=args.topics_format)
            self.label_width = max(self.label_width, max(len(tok(c.topic)["input_ids"]) for c in generate_conversations()))

    def topics_by_count(self, step: int, size: int) -> IdBatch:
        """``size`` records of :meth:`lengthx.tasks.topics.TopicsTask.training_record` (text, then ids), drawn from a
        generator seeded by (seed, step): a resumed run draws the same records. A draw whose opening sentences do
        not fit L_tr (six long ones can exceed it) is drawn again."""
        rng = random.Random(f"topics-counts:{self.seed}:{step}")
        prompts, answers = [], []
        while len(prompts) < size:
            try:
                prompt, topic, _ = self.topics.training_record(self.tok, self.l_tr, self.k_max, rng)
            except ValueError:
                continue
            prompts.append(prompt)
            answers.append(topic)
        enc = self.tok(prompts, padding="max_length", max_length=self.l_tr, return_tensors="pt")
        labels = torch.full((size, self.label_width), IGNORE, dtype=torch.long)
        for i, ids in enumerate(self.tok(answers)["input_ids"]):
            labels[i, : len(ids)] = torch.tensor(ids)
        return IdBatch(enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device), labels.to(self.device))

    def batch(self, step: int, lines_count: int, gen: torch.Generator,
              form: str = "benchmark") -> tuple[IdBatch, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(batch, task index per example, lines kept per example (0 for other tasks), whether each example is a
        multi-query lines record); lookup records in ``form`` (:data:`lengthx.minis.lookup_data.FORMS`)."""
        ramp = 1.0 if self.ramp_steps <= 0 else min(1.0, (step + 1) / self.ramp_steps)
        parts, task, n_lines = [], [], []
        multi = torch.zeros(sum(self.sizes.values()), dtype=torch.bool, device=self.device)
        row = 0
        for t, size in self.sizes.items():
            if t == "lines":
                exact = torch.rand(size, generator=gen, device=self.device) < 0.5
                below = torch.randint(1, lines_count + 1, (size,), generator=gen, device=self.device)
                asked = torch.where(exact, lines_count, below)
                if self.lookup is not None:
                    b, kept, is_multi = self.lookup.sample(step, asked.tolist(), form)
                    multi[row : row + size] = is_multi
                    n_lines.append(kept)
                else:
                    b = self.gens[t].sample(size, asked, gen)
                    n_lines.append(b.draw["n_lines"])
            elif t == "topics" and self.counts:
                b = self.topics_by_count(step, size)
                n_lines.append(torch.zeros(size, dtype=torch.long, device=self.device))
            else:
                b = self.gens[t].sample(size, ramp, gen)
                n_lines.append(torch.zeros(size, dtype=torch.long, device=self.device))
            parts.append(b)
            task.append(torch.full((size,), TASKS.index(t), dtype=torch.long, device=self.device))
            row += size
        labels = torch.full((sum(self.sizes.values()), self.label_width), IGNORE, dtype=torch.long, device=self.device)
        row = 0
        for b in parts:
            labels[row : row + len(b.labels), : b.labels.shape[1]] = b.labels[:, : self.label_width]
            row += len(b.labels)
        if self.lookup is not None:  # multi-query targets are long: no decoder steps past the batch's longest
            labels = labels[:, : int((labels != IGNORE).sum(1).max())]
        batch = IdBatch(torch.cat([b.input_ids for b in parts]), torch.cat([b.attention_mask for b in parts]), labels)
        return batch, torch.cat(task), torch.cat(n_lines), multi

