"""Next-line code completion on LCC (Guo et al. 2023, LongCoder), paper A §5.4 / Tables 6, 12, 13.

Benchmark facts (docs/design.md §6), as LongCoder's ``run.py`` evaluates LCC: a row is a Python file prefix
``context`` and the next line ``gt``; runs of newlines in the context become one (:func:`collapse_newlines`); the
prediction is the output up to its first newline; both lines are tokenised with tree-sitter (string literals
and comments whole) and joined by spaces; exact match is ``pred.split() == gt.split()`` and edit similarity
fuzzywuzzy's integer ``fuzz.ratio`` (:mod:`lengthx.tasks.metrics`). Results are reported per context length
bucket ``[n·1000, (n+1)·1000)`` tokens, n = 1..15, at L_tr = 768 (CodeT5+ 770M-py).

Data sources (``task.source``):

- ``hf``: the Hugging Face dataset ``microsoft/LCC_python`` (``task.hf_dataset``, split ``task.hf_split``),
  loaded with ``datasets`` from the hub or the local cache (the ``paper`` profile's default).
- ``jsonl``: a local JSON-lines file (``task.data_path``, ``.jsonl`` or ``.jsonl.gz``) with the same fields
  ``context`` and ``gt``; a malformed line fails with the file, line number and missing field.
- ``stdlib``: an LCC-like set built offline from the Python standard library's own source files (the
  ``mini`` profile's default): the context is the last n tokens (model tokenizer) before a line boundary of
  a real file (its blank and whitespace-only lines dropped, so the next line is never blank), the next line is
  the ground truth.

Settings: ``bucket`` (value = the bucket's lower bound in tokens, the paper's unit; LCC rows whose context
falls in the bucket, or stdlib contexts of a seeded length inside it) or ``tokens`` (contexts of exactly
that many tokens: stdlib contexts cut to length, LCC contexts at least that long left-truncated to it).

The ``truncation`` baseline (paper A §5.4) keeps the most recent L_tr tokens of the context:
:func:`truncate_prompt` / :meth:`CodeCompletionTask.truncated`. This module also holds the text-window
helpers other tasks reuse (:func:`suffix_with_tokens`, :func:`prefix_with_tokens`, :func:`stdlib_sources`).
"""

from __future__ import annotations

import random
import re
import sysconfig
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthx.data.corpora import stdlib_split
from lengthx.data.fitting import chars_per_token, count_tokens, suffix_with_tokens
from lengthx.data.hub import load_hub_dataset
from lengthx.data.jsonl import read_jsonl
from lengthx.data.provenance import file_label, hub_label, stdlib_label
from lengthx.tasks.base import Example, Setting, Task, draw_items, hub_problem, missing_path
from lengthx.tasks.metrics import code_exact_match, edit_similarity, first_line

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

LCC_DATASET = "microsoft/LCC_python"


BUCKET_WIDTH = 1000


_NEWLINES = re.compile("\n+")



def collapse_newlines(text: str) -> str:
    """LCC preprocessing as LongCoder's ``run.py`` does it (``re.sub("\\n+", "\\n", source)``): a run of newlines
    becomes one; a line of spaces stays, and so does one leading newline."""
    return _NEWLINES.sub("\n", text)


def drop_blank_lines(text: str) -> str:
    """The offline stand-ins' preprocessing (standard-library rows, code key's files): blank and whitespace-only
    lines are dropped, so a row's next line is never blank."""
    kept = [line for line in text.split("\n") if line.strip()]
    out = "\n".join(kept)
    return out + "\n" if text.endswith("\n") and kept else out


@dataclass(frozen=True)
class CodeRow:
    """One completion case: the code before the line, the line itself and where it came from."""

    context: str
    gt: str
    source: str


def read_lcc_jsonl(path: str | Path) -> list[CodeRow]:
    """LCC rows from a local JSON-lines file with string fields ``context`` and ``gt``."""
    rows = read_jsonl(path, {"context": str, "gt": str})
    return [CodeRow(r["context"], r["gt"], f"{Path(path).name}:{r['_line']}") for r in rows]


def load_lcc_hf(name: str = LCC_DATASET, split: str = "test") -> list[CodeRow]:
    """LCC rows from the Hugging Face hub or local cache via ``datasets`` (fields ``context``, ``gt``)."""
    ds = load_hub_dataset(name, split, ("context", "gt"),
                          hint="Offline, use task.source=stdlib or task.source=jsonl task.data_path=FILE with "
                               "fields context and gt")
    return [CodeRow(r["context"], r["gt"], f"{name}:{split}:{i}") for i, r in enumerate(ds)]


def stdlib_row(rng: random.Random, tokenizer: PreTrainedTokenizerBase, n_tokens: int,
               files: tuple[tuple[str, str], ...], max_tries: int = 400) -> CodeRow:
    """An LCC-like row: the last ``n_tokens`` tokens (special tokens included) before a line boundary of a
    standard-library file (blank lines dropped: :func:`drop_blank_lines`), and that file's next line as ``gt``."""
    for _ in range(max_tries):
        rel, raw = files[rng.randrange(len(files))]
        text = drop_blank_lines(raw)
        ratio = chars_per_token(tokenizer, text)
        need = int(n_tokens * ratio * 1.05) + 1
        if len(text) <= need:
            continue
        starts = [i + 1 for i, ch in enumerate(text) if ch == "\n" and i + 1 >= need and i + 1 < len(text)]
        if not starts:
            continue
        cut = starts[rng.randrange(len(starts))]
        gt = text[cut:].split("\n", 1)[0].strip()
        if not gt:
            continue
        before = text[:cut]
        context = suffix_with_tokens(tokenizer, before, n_tokens)
        if len(context) < len(before):  # the file had more than n tokens before the line: exact fit
            return CodeRow(context, gt, f"stdlib/{rel}:{text.count(chr(10), 0, cut) + 1}")
    raise ValueError(f"could not find a standard-library file with {n_tokens} tokens before a line")


class CodeCompletionTask(Task):
    """LCC next-line completion: seeded rows per length bucket, EM and edit similarity of the first line."""

    name = "code_completion"
    metrics = ("exact_match", "edit_similarity")
    units = ("bucket", "tokens")  # what task.unit may name (the unit of explicit task.settings)
    calibration_item = "source"  # meta key of an example's (file, line) or row (lengthx.tasks.base.CALIBRATION_RESERVE)
    paper_data = f"{LCC_DATASET} (Hugging Face hub, test split)"
    stand_in = {"stdlib": "the Python standard library's own source (held-out files)"}
    scores_first_line = True  # generation may stop after the first complete line (lengthx.models.generation.FirstLineDone)

    def __init__(self, max_new_tokens: int = 64, source: str = "auto", data_path: str | None = None,
                 hf_dataset: str = LCC_DATASET, hf_split: str = "test", bucket_width: int = BUCKET_WIDTH,
                 profile: str = "mini", stdlib_split: str = "all", same_text: bool = False,
                 start_with_text: bool = False):
        self.max_new_tokens = max_new_tokens
        self.start_with_text = bool(start_with_text)  # the first generated token may not be whitespace only
        self.stdlib_split, self.same_text = stdlib_split, bool(same_text)
        self.longest: int | None = None  # same_text: the sweep's longest context (set by the runner)
        self.source = resolve_source(source, data_path, profile)
        self.data_path, self.hf_dataset, self.hf_split = data_path, hf_dataset, hf_split
        self.bucket_width = int(bucket_width)
        self._rows: list[CodeRow] | None = None
        self._lengths: dict[tuple[int, str], list[int]] = {}

    @classmethod
    def from_config(cls, task_cfg: Any, profile: str = "mini") -> CodeCompletionTask:
        """The task from its Hydra config (``conf/task/code_completion.yaml``)."""
        return cls(max_new_tokens=int(task_cfg.max_new_tokens), source=task_cfg.get("source", "auto"),
                   data_path=task_cfg.get("data_path"), hf_dataset=task_cfg.get("hf_dataset", LCC_DATASET),
                   hf_split=task_cfg.get("hf_split", "test"),
                   bucket_width=int(task_cfg.get("bucket_width", BUCKET_WIDTH)), profile=profile,
                   stdlib_split=str(task_cfg.get("stdlib_split", "all")),
                   same_text=bool(task_cfg.get("same_text", False)),
                   start_with_text=bool(task_cfg.get("start_with_text", False)))

    @staticmethod
    def data_problem(task_cfg: Any, profile: str, settings: list[Setting] | None = None) -> str | None:
        """Why this config cannot read its rows, or ``None`` (a missing file; a hub dataset offline and not
        cached). The standard library is always there."""
        return code_data_problem("code_completion", task_cfg, profile, "context, gt")

    def data_source(self, setting: Setting) -> str:
        """The rows' file (name and hash), hub dataset and split, or standard-library split."""
        return code_data_label(self.source, self.data_path, self.hf_dataset, self.hf_split,
                               stdlib_label(self.stdlib_split))

    # ---- rows ------------------------------------------------------------------------------------------
    def rows(self) -> list[CodeRow]:
        """The real rows (``hf`` or ``jsonl`` source), loaded once."""
        if self._rows is None:
            if self.source == "jsonl":
                if not self.data_path:
                    raise ValueError("task.source=jsonl needs task.data_path=FILE (fields context, gt)")
                self._rows = read_lcc_jsonl(self.data_path)
            else:
                self._rows = load_lcc_hf(self.hf_dataset, self.hf_split)
        return self._rows

    def _context_lengths(self, tokenizer) -> list[int]:
        key = (id(tokenizer), getattr(tokenizer, "name_or_path", ""))
        if key not in self._lengths:
            self._lengths[key] = [count_tokens(tokenizer, collapse_newlines(r.context)) for r in self.rows()]
        return self._lengths[key]

    # ---- examples --------------------------------------------------------------------------------------
    def examples(self, setting: Setting, tokenizer: PreTrainedTokenizerBase, n: int, seed: int, exclude: Collection[str] = (),
                 reserve: int = 0) -> list[Example]:
        """``n`` seeded examples at ``setting`` (a ``bucket`` lower bound or an exact ``tokens`` count).

        Rows or (file, line)s in ``exclude`` (``meta["source"]``) are never drawn: Algorithm 1's calibration
        examples exclude the evaluation's. ``reserve``: when ``n`` asks for every row of a bucket, that many
        are left out for calibration (:func:`lengthx.tasks.base.draw_items`)."""
        if setting.unit not in ("bucket", "tokens"):
            raise ValueError(f"code_completion settings are in bucket or tokens, not {setting.unit!r}")
        if self.source == "stdlib":
            return self._stdlib_examples(setting, tokenizer, n, seed, set(exclude))
        return self._row_examples(setting, tokenizer, n, seed, set(exclude), reserve)

    def _stdlib_examples(self, setting: Setting, tokenizer, n: int, seed: int,
                         exclude: set[str] | None = None) -> list[Example]:
        """Seeded rows of the standard library. With ``same_text`` example i is one (file, line) at every
        length: the row is drawn with the sweep's longest context and each setting reads its last
        ``requested`` tokens, so only the amount of code before the line changes across a table's row.
        A draw whose (file, line) is in ``exclude`` is skipped for the next draw."""
        files = stdlib_split(self.stdlib_split)
        out: list[Example] = []
        for i in range(n + len(exclude or ()) + 100):
            if len(out) == n:
                break
            rng = random.Random(f"code_completion:{seed}:{i}")
            if setting.unit == "bucket":
                size = random.Random(f"code_completion:{seed}:{i}:size") if self.same_text else rng
                requested = size.randrange(setting.value, setting.value + self.bucket_width)
            else:
                requested = setting.value
            span = max(requested, self.longest or 0) if self.same_text else requested
            row = stdlib_row(rng, tokenizer, span, files)
            if exclude and row.source in exclude:
                continue
            if span != requested:
                row = replace(row, context=suffix_with_tokens(tokenizer, row.context, requested))
            out.append(self._example(f"{seed}-{i}", row, row.context, requested, tokenizer, setting))
        return out

    def _row_examples(self, setting: Setting, tokenizer, n: int, seed: int, exclude: set[str] | None = None,
                      reserve: int = 0) -> list[Example]:
        rows, lengths = self.rows(), self._context_lengths(tokenizer)
        if setting.unit == "bucket":
            lo, hi = setting.value, setting.value + self.bucket_width
            pool = [i for i, n_tok in enumerate(lengths) if lo <= n_tok < hi]
        else:
            pool = [i for i, n_tok in enumerate(lengths) if n_tok >= setting.value]
        if not pool:
            raise ValueError(f"no {self.source} row has a context in {setting.label} ({setting.value} "
                             f"{setting.unit}) for this tokenizer")
        if exclude:
            pool = [i for i in pool if rows[i].source not in exclude]
        chosen = draw_items(pool, n, reserve, f"code_completion:reserve:{seed}:{setting.label}",
                            f"code_completion:{seed}")
        out = []
        for k, i in enumerate(chosen):
            row = rows[i]
            context = collapse_newlines(row.context)
            requested = None
            if setting.unit == "tokens":
                requested = setting.value
                context = suffix_with_tokens(tokenizer, context, requested)
            out.append(self._example(f"{seed}-{k}", row, context, requested, tokenizer, setting))
        return out

    def _example(self, ex_id: str, row: CodeRow, context: str, requested: int | None, tokenizer,
                 setting: Setting) -> Example:
        meta: dict[str, Any] = {"source": row.source}
        if setting.unit == "bucket":
            meta["bucket"] = [setting.value, setting.value + self.bucket_width]
        if self.source == "stdlib":
            meta["python"] = sysconfig.get_python_version()
        return Example(ex_id, context, row.gt, requested, count_tokens(tokenizer, context), meta)

    # ---- scoring ---------------------------------------------------------------------------------------
    def score(self, output: str, example: Example) -> dict[str, float]:
        """EM (0/100) and edit similarity (0-100) of the output's first line against the ground truth, as
        LongCoder's LCC evaluation scores them: the output up to its first newline
        (:func:`lengthx.tasks.metrics.first_line`), both lines as tree-sitter code tokens, ES an integer."""
        pred, gt = first_line(output), str(example.target)
        return {"exact_match": 100.0 * code_exact_match(pred, gt), "edit_similarity": edit_similarity(pred, gt)}


def resolve_source(source: str, data_path: str | None, profile: str, real: str = "hf",
                   offline: str = "stdlib") -> str:
    """``auto`` → ``jsonl`` when a data path is given, the real dataset (``hf``) in the paper profile, else
    the offline corpus; explicit choices are checked against the known ones."""
    valid = ("auto", real, "jsonl", offline)
    if source not in valid:
        raise ValueError(f"unknown task.source={source!r}; valid: {', '.join(valid)}")
    if source != "auto":
        return source
    if data_path:
        return "jsonl"
    return real if profile == "paper" else offline


def code_data_problem(task: str, task_cfg: Any, profile: str, fields: str) -> str | None:
    """What keeps a code task (completion, code key) from its data, or ``None``."""
    source = resolve_source(task_cfg.get("source", "auto"), task_cfg.get("data_path"), profile)
    if source == "jsonl":
        if not task_cfg.get("data_path"):
            return f"task.source=jsonl needs task.data_path=FILE (a .jsonl[.gz] with fields {fields})"
        return missing_path("task.data_path", task_cfg.data_path, f"a .jsonl[.gz] file with fields {fields}")
    if source == "hf":
        return hub_problem(task, str(task_cfg.get("hf_dataset", LCC_DATASET)), str(task_cfg.get("hf_split", "test")),
                           f"pass task.source=jsonl task.data_path=FILE (fields {fields})")
    return None


def code_data_label(source: str, data_path: str | None, hf_dataset: str, hf_split: str, stdlib: str) -> str:
    """The ``data`` column of a code task's rows (lengthx.data.provenance)."""
    if source == "jsonl":
        return file_label(data_path) if data_path else ""
    if source == "hf":
        return hub_label(hf_dataset, hf_split)
    return stdlib
