"""The retrieval stand-in's held-out exact match (docs/mini-t5-study.md): the harness's own task classes at a token
length, greedy decoding, each task's own scoring rule (the model card's protocol)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerFast, T5ForConditionalGeneration

from lengthx.data.fitting import count_tokens
from lengthx.minis.retrieval_data import TASKS
from lengthx.tasks.base import Setting
from lengthx.tasks.lines import LinesTask, case_seed, lines_case_at
from lengthx.tasks.passkey import PasskeyTask
from lengthx.tasks.topics import TopicsTask

EVAL_TASKS = {"passkey": PasskeyTask, "lines": LinesTask, "topics": TopicsTask}
MAX_NEW = {"passkey": 8, "lines": 24, "topics": 24}  # lines: room for the lookup stand-in's echo of the key


def held_out(tok: PreTrainedTokenizerFast, length: int, n: int, seed: int,
             names: tuple[str, ...] = TASKS, topics_format: str = "longeval",
             counts: tuple[int, ...] = (), lines_format: str = "longeval",
             lines_counts: tuple[int, ...] = (), fill_counts: tuple[int, ...] = ()) -> dict[str, tuple[Any, list]]:
    """The harness's own examples (task classes, token-fitted with this tokenizer) at ``length`` tokens; topics in
    ``topics_format``, and ``topics-k<K>`` sets of exactly K conversations for each of ``counts``; lines in
    ``lines_format``, ``lines-n<N>`` sets of exactly N lines in at most ``length`` tokens for each of
    ``lines_counts``, and ``lines-fill-n<K>`` sets of exactly K lines padded with filler to ``length`` tokens
    (``task.num_lines=K``) for each of ``fill_counts``."""
    setting = Setting(str(length), length, "tokens")
    tasks = {name: EVAL_TASKS[name]() for name in names if name not in ("topics", "lines")}
    sets: dict[str, tuple[Any, list]] = {}
    if "lines" in names:
        tasks["lines"] = LinesTask(prompt_format=lines_format)
        for k in lines_counts:
            sets[f"lines-n{k}"] = (tasks["lines"], lines_exactly(tok, tasks["lines"], k, length, n, seed))
        for k in fill_counts:
            filled = LinesTask(prompt_format=lines_format, num_lines=k)
            sets[f"lines-fill-n{k}"] = (filled, lines_filled(tok, filled, length, n, seed + 7919 * k))
    if "topics" in names:
        tasks["topics"] = TopicsTask(prompt_format=topics_format)
        tasks.update({f"topics-k{k}": TopicsTask(prompt_format=topics_format, num_topics=k) for k in counts})
    return {**{name: (task, task.examples(setting, tok, n, seed)) for name, task in tasks.items()}, **sets}


def lines_exactly(tok: PreTrainedTokenizerFast, task: LinesTask, k: int, length: int, n: int, seed: int) -> list:
    """``n`` lines examples of exactly ``k`` lines whose prompts fit ``length`` tokens: the task's own examples of
    ``k`` lines at consecutive example seeds, those too long skipped."""
    out: list = []
    for block in range(100):
        batch = task.examples(Setting(str(k), k, "lines"), tok, 4 * n, seed + 7919 * k + block)
        out += [e for e in batch if e.actual_tokens <= length][: n - len(out)]
        if len(out) == n:
            return out
    raise ValueError(f"records of {k} lines rarely fit {length} tokens: found {len(out)} of {n}")


def lines_filled(tok: PreTrainedTokenizerFast, task: LinesTask, length: int, n: int, seed: int) -> list:
    """``n`` examples of ``task`` (a ``num_lines`` task) at ``length`` tokens, one per example seed from ``seed`` on,
    those whose own draw of lines alone exceeds ``length`` skipped (not redrawn, as the task would: the card's
    sets stay those its bar was fixed on, docs/mini-t5-lookup.md)."""
    out: list = []
    for s in range(seed, seed + 100 * n):
        own = lines_case_at(int(task.num_lines), case_seed(s, 0), task.prompt_format)
        if count_tokens(tok, own.prompt) > length:  # its own draw does not fit: the next seed
            continue
        out += task.examples(Setting(str(length), length, "tokens"), tok, 1, s)
        if len(out) == n:
            return out
    raise ValueError(f"records of {task.num_lines} lines rarely fit {length} tokens: found {len(out)} of {n}")


@torch.no_grad()
def exact_match(model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast, sets: dict[str, tuple[Any, list]],
                batch_size: int = 64) -> dict[str, float]:
    """Greedy decoding, scored by each task's own rule (accuracy, %)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: dict[str, float] = {}
    for name, (task, examples) in sets.items():
        scores = []
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            enc = tok([e.prompt for e in chunk], return_tensors="pt", padding=True).to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                ids = model.generate(**enc, max_new_tokens=MAX_NEW[name.split("-")[0]], do_sample=False,
                                     num_beams=1)
            for text, e in zip(tok.batch_decode(ids, skip_special_tokens=True), chunk, strict=True):
                scores.append(task.score(text, e)["accuracy"])
        out[name] = sum(scores) / len(scores)
    model.train(was_training)
    return out
