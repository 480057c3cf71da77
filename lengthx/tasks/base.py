"""What every task provides: examples at a setting, a scoring rule, and per-task generation length.

Settings (docs/design.md §3): each task has the paper's settings (``paper_settings`` in ``paper_unit``, with
column labels) and the approximate token lengths ``paper_l_ex`` they correspond to at the paper's L_tr.
The ``paper`` profile runs the paper's settings as they are; the ``mini`` profile scales ``paper_l_ex`` by
L_tr(model) / L_tr(paper), so "15k tokens at L_tr 512" keeps its ratio on a small model. An explicit
``task.settings=[…]`` runs those values in ``task.unit``, labelled with value and unit (``20000chars``): a
paper column label such as ``20k`` stands for different lengths in different profiles and units, and a cell
key (model|method|task|label, docs/design.md §7) must name one length.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lengthx.data.fitting import count_tokens, truncate_prompt
from lengthx.data.provenance import hub_dataset_cached, hub_offline


@dataclass(frozen=True)
class Setting:
    """One point on a task's sweep axis: its table column label, a value and the value's unit."""

    label: str
    value: int
    unit: str  # "tokens" (fitted with the tokenizer) or a task-specific unit such as "chars"


@dataclass
class Example:
    """One prompt with its target; ``requested_tokens``/``actual_tokens`` record the length fitting."""

    id: str
    prompt: str
    target: Any
    requested_tokens: int | None
    actual_tokens: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_hash(self) -> str:
        return hashlib.sha256(self.prompt.encode()).hexdigest()[:16]


class Task:
    """What every task provides (docs/design.md §3, §6): a task class sets the class attributes in which it differs
    from these defaults and implements :meth:`examples` and :meth:`score` (a ``likelihood`` task: ``evaluate``).

    - ``name``, ``metrics``: its config name and the metrics its rows hold, the first one the tables' default;
    - ``units``: what ``task.unit`` may name (the unit of explicit ``task.settings``);
    - ``scoring``: ``generation`` (generate, then :meth:`score`), ``likelihood`` (the runner calls ``evaluate``)
      or ``perplexity`` (sequences scored whole: :mod:`lengthx.core.perplexity`);
    - ``calibration_item``: the ``meta`` key naming an example's item of a finite pool, so calibration never
      reads an item the evaluation reads (:data:`CALIBRATION_RESERVE`), or None;
    - ``scores_first_line``: generation may stop after the first complete line; ``start_with_text``: the prompt
      is generated after a text start (decoder-only chat formats);
    - ``same_text``: every setting reads the same text (its longest setting's, ``longest``, set by
      :func:`lengthx.tasks.build_task`);
    - ``paper_data``, ``stand_in`` (data label → what it is) and ``score_note``: what the tables' notes say of
      the rows' data and scoring (:func:`lengthx.report.tables.render.table_notes`).
    """

    name: str = ""
    metrics: tuple[str, ...] = ()
    units: tuple[str, ...] = ("tokens",)
    scoring: str = "generation"
    calibration_item: str | None = None
    scores_first_line: bool = False
    start_with_text: bool = False
    same_text: bool = False
    longest: int | None = None
    paper_data: str = ""
    stand_in: dict[str, str] = {}  # noqa: RUF012 - read only, a class constant
    score_note: str | None = None
    max_new_tokens: int = 0

    @classmethod
    def from_config(cls, task_cfg: Any, profile: str = "mini") -> Task:
        """The task a config describes; by default only its ``max_new_tokens``."""
        return cls(max_new_tokens=int(task_cfg.max_new_tokens))  # type: ignore[call-arg]

    @staticmethod
    def data_problem(task_cfg: Any, profile: str, settings: list[Setting] | None = None) -> str | None:
        """Why the data a run of ``task_cfg`` reads is missing (None when it is there), before any model loads."""
        return None

    def data_source(self, setting: Setting) -> str | None:
        """What the setting's examples are built from (the ``data`` column); None: named only when the run reads
        it."""
        return None

    def set_training_length(self, l_tr: int) -> None:
        """Learn the model's training length (a task whose lengths depend on it)."""

    def examples(self, setting: Setting, tokenizer: Any, n: int, seed: int) -> list[Example]:
        """The first ``n`` examples of the setting's seeded sequence."""
        raise NotImplementedError(f"task {self.name} builds no examples")

    def score(self, output: str, example: Example) -> dict[str, float]:
        """The metrics of one generated ``output``."""
        raise NotImplementedError(f"task {self.name} scores no generated output (scoring: {self.scoring})")


# Algorithm 1 calibrates on examples that are not evaluation examples (docs/design.md §5). A task that draws its
# examples from a finite pool (MDQA's questions, LCC's rows) names each example's pool item in
# ``meta[task.calibration_item]``; calibration examples exclude the evaluation's items, and an evaluation that
# asks for every item of its pool (the paper profile: every question, every row of a bucket) leaves this many
# (at most half the pool) for calibration.
CALIBRATION_RESERVE = 5  # the paper profile's calibration.num_examples


def reserved_items(pool: list[Any], n: int, reserve: int, key: str) -> set[Any]:
    """The items of ``pool`` an evaluation of ``n`` examples leaves for calibration: none when ``n`` is smaller
    than the pool (the evaluation's seeded sample leaves the rest), else ``min(reserve, len(pool) // 2)`` of
    them, chosen by ``key``'s seed."""
    keep = min(reserve, len(pool) // 2)
    if keep == 0 or n < len(pool):
        return set()
    return set(random.Random(key).sample(pool, keep))


def draw_items(pool: list[Any], n: int, reserve: int, reserve_key: str, sample_key: str) -> list[Any]:
    """The evaluation's items of ``pool``: all but :func:`reserved_items` when ``n`` covers the pool, else a
    sorted seeded sample of ``n`` (``sample_key``), so calibration can draw from what the evaluation leaves."""
    held = reserved_items(pool, n, reserve, reserve_key)
    pool = [i for i in pool if i not in held]
    return pool if n >= len(pool) else sorted(random.Random(sample_key).sample(pool, n))


def explicit_label(value: int, unit: str) -> str:
    """Column label of an explicit setting, its value and unit: (20000, "chars") → "20000chars".

    Never one of a task's own labels ("20k", "200", "10docs@0"), so an explicit length cannot share a cell key
    with a paper column, nor with the same number in another unit."""
    return f"{value}{unit}"


def resolve_settings(task_cfg: Any, profile: str, l_tr: int) -> list[Setting]:
    """The settings a run sweeps, from the task config, the profile and the model's training length.

    ``task.only=[label, …]`` keeps just those columns (e.g. ``task.only=[20k,55k]``)."""
    settings = all_settings(task_cfg, profile, l_tr)
    only = task_cfg.get("only")
    if only:
        wanted = [str(x) for x in only]
        unknown = sorted(set(wanted) - {s.label for s in settings})
        if unknown:
            raise ValueError(f"task.only names unknown settings {unknown}; this task's settings are "
                             f"{[s.label for s in settings]}")
        settings = [s for s in settings if s.label in wanted]
    return settings


# the tasks whose records can hold a fixed count at token lengths: task name -> its count key (task.num_topics,
# task.num_lines; docs/usage.md); the name is also the unit of a setting label's suffix (``256tokens-2lines``)
COUNT_KEYS = {"topics": "num_topics", "lines": "num_lines"}


def all_settings(task_cfg: Any, profile: str, l_tr: int) -> list[Setting]:
    """Every setting of the task's sweep, before ``task.only`` narrows it."""
    explicit = task_cfg.get("settings")
    if explicit:
        unit = task_cfg.get("unit") or "tokens"
        # topics or lines with a fixed count (task.num_topics, task.num_lines): its own column per count
        counts = [f"-{task_cfg.get(key)}{noun}" for noun, key in COUNT_KEYS.items() if task_cfg.get(key) is not None]
        suffix = "".join(counts)
        return [Setting(explicit_label(int(v), unit) + suffix, int(v), unit) for v in explicit]
    labels = list(task_cfg.labels)
    if profile == "paper":
        return [Setting(lb, int(v), task_cfg.paper_unit) for lb, v in zip(labels, task_cfg.paper_settings, strict=True)]
    scale = l_tr / float(task_cfg.paper_l_tr)
    return [Setting(lb, round(float(v) * scale), "tokens") for lb, v in zip(labels, task_cfg.paper_l_ex, strict=True)]


def count_knob_problem(task_cfg: Any, profile: str, task: str, key: str, noun: str, formats: Any) -> str | None:
    """Why ``task.format`` or the fixed count ``task.<key>`` (``num_topics``, ``num_lines``: records of exactly that
    many ``noun`` at explicit token lengths) cannot run, or ``None``: a format of ``formats``, the short one only
    outside profile=paper, a whole count of at least 1 with ``task.unit=tokens``, explicit settings and no
    released test cases (docs/usage.md)."""
    fmt, k = task_cfg.get("format"), task_cfg.get(key)
    if fmt is not None and str(fmt) not in formats:
        return f"task.format={fmt}: no such {task} format. Fix: task.format=longeval or task.format=short"
    if str(fmt) == "short" and profile == "paper":
        return ("task.format=short is the mini profile's shortened header (docs/usage.md, task.format); profile=paper "
                "keeps LongEval's prompt byte for byte. Fix: drop task.format")
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        return f"task.{key}={k}: not a count of {noun}. Fix: a whole number of at least 1, e.g. task.{key}=3"
    fix = "Fix: task.unit=tokens 'task.settings=[L, …]' (lengths in tokens)"
    released = task_cfg.get("testcases_dir")
    if str(task_cfg.get("unit")) != "tokens" or released:
        return (f"task.{key}={k} fixes the count of token-length records; task.unit={task_cfg.get('unit')} "
                f"settings{' and task.testcases_dir' if released else ''} are counts already. "
                f"{fix}{' and no task.testcases_dir' if released else ''}")
    if not task_cfg.get("settings"):
        return f"task.{key}={k} needs explicit lengths (its records get their own columns). {fix}"
    return None


def truncated_example(example: Example, tokenizer: Any, l_tr: int) -> Example:
    """The ``truncation`` baseline's version of ``example`` (paper A §5.4): the last ``l_tr`` tokens of its prompt.

    ``requested_tokens`` keeps the setting's request; ``actual_tokens`` is what the model now reads, and
    ``meta["untruncated_tokens"]`` the original length (the table column stays the setting).
    """
    prompt = truncate_prompt(tokenizer, example.prompt, l_tr)
    meta = {**example.meta, "untruncated_tokens": example.actual_tokens, "truncated_to": l_tr}
    return replace(example, prompt=prompt, actual_tokens=count_tokens(tokenizer, prompt), meta=meta)


# ---- the data a task reads (checked before any model loads: lengthx.cli.validate) ------------------------
def missing_path(key: str, path: Any, what: str) -> str | None:
    """The problem when ``path`` (the config key ``key``) does not exist, naming what it should hold."""
    if not Path(str(path)).exists():
        return f"{key}={path}: no such file or directory. Fix: point {key} at {what}"
    return None


def hub_problem(task: str, dataset: str, split: str, fix: str) -> str | None:
    """The problem when a hub dataset can be neither downloaded (offline) nor read from the local cache."""
    if hub_offline() and not hub_dataset_cached(dataset):
        return (f"task={task} reads the Hugging Face dataset {dataset} (split {split}), which is not in the local "
                f"cache, and the hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE). Fix: load it once "
                f"online, or {fix}")
    return None
