"""Code key retrieval (paper A §5.4, after Code Llama's key retrieval, Rozière et al. 2023).

Benchmark facts (DESIGN §6): several real code files are concatenated, a special function that only
returns an integer in 1..100 is placed among them at a random depth, and the prompt ends by asking for that
integer; the paper reports 100 cases at about 16k CodeT5+ tokens (L_tr = 768). The score is whether the
integer matches (the first integer of the completion).

Our format (the paper does not print one): files are joined with a ``# file: <path>`` comment line, the
key function is inserted before a file or a top-level statement (a line starting with ``def``, ``class``,
``@``, ``import`` or ``from``) nearest to the chosen depth, and the prompt ends with an ``assert`` line for the
model to complete::

    def special_function() -> int:
        \"\"\"Only returns an integer.\"\"\"
        return 42
    ...
    assert special_function() ==

Code: the standard library's own sources offline (``task.source=stdlib``, the mini default), or LCC
contexts (``hf``: ``microsoft/LCC_python``; ``jsonl``: a local file with a ``context`` field). Lengths are
fitted to the requested token count with the model's tokenizer by bisection on the haystack size, cut at
line ends.
"""

from __future__ import annotations

import bisect
import random
import re
import sysconfig
from dataclasses import dataclass
from typing import Any

from lengthx.data.fitting import count_tokens
from lengthx.metrics import code_key_correct
from lengthx.tasks.base import Example, Setting
from lengthx.tasks.code_completion import (
    LCC_DATASET,
    chars_per_token,
    collapse_newlines,
    largest_fitting,
    load_lcc_hf,
    read_jsonl,
    resolve_source,
    stdlib_sources,
)

FUNCTION_NAME = "special_function"
KEY_FUNCTION = (
    "def {name}() -> int:\n"
    '    """Only returns an integer."""\n'
    "    return {key}\n"
)
QUESTION = "assert {name}() == "
FILE_HEADER = "# file: {path}\n"
MAX_KEY = 100
_TOP_LEVEL = re.compile(r"^(# file: |def |class |@|import |from |async def )", re.MULTILINE)


def key_function(key: int, name: str = FUNCTION_NAME) -> str:
    """The special function that only returns ``key``."""
    return KEY_FUNCTION.format(name=name, key=key)


def code_key_prompt(haystack: str, insert_at: int, key: int, name: str = FUNCTION_NAME) -> str:
    """``haystack`` with the key function inserted at character ``insert_at`` (a line start), then the
    question line. The haystack is expected to end with a newline (it is cut at line ends)."""
    if not 0 <= insert_at <= len(haystack):
        raise ValueError(f"insert_at={insert_at} outside the haystack (0..{len(haystack)})")
    before, after = haystack[:insert_at], haystack[insert_at:]
    sep = "" if not before or before.endswith("\n") else "\n"
    return before + sep + key_function(key, name) + "\n" + after + ("" if after.endswith("\n") or not after
                                                                      else "\n") + QUESTION.format(name=name)


@dataclass(frozen=True)
class CodeKeyCase:
    """One case: the key (1..100), its relative depth and the seed that orders the code files."""

    key: int
    depth: float
    file_seed: int


def code_key_cases(n: int, seed: int) -> list[CodeKeyCase]:
    """``n`` seeded cases, identical for every method and model."""
    rng = random.Random(f"code_key:{seed}")
    return [CodeKeyCase(rng.randint(1, MAX_KEY), rng.random(), rng.randrange(2**31)) for _ in range(n)]


class CodeKeyTask:
    """Code key retrieval as a runnable task: fitted haystacks of real code, first-integer scoring."""

    name = "code_key"
    metrics = ("accuracy",)

    def __init__(self, max_new_tokens: int = 10, source: str = "auto", data_path: str | None = None,
                 hf_dataset: str = LCC_DATASET, hf_split: str = "test", profile: str = "mini"):
        self.max_new_tokens = max_new_tokens
        self.source = resolve_source(source, data_path, profile)
        self.data_path, self.hf_dataset, self.hf_split = data_path, hf_dataset, hf_split
        self._files: list[tuple[str, str]] | None = None

    @classmethod
    def from_config(cls, task_cfg: Any, profile: str = "mini") -> CodeKeyTask:
        """The task from its Hydra config (``conf/task/code_key.yaml``)."""
        return cls(max_new_tokens=int(task_cfg.max_new_tokens), source=task_cfg.get("source", "auto"),
                   data_path=task_cfg.get("data_path"), hf_dataset=task_cfg.get("hf_dataset", LCC_DATASET),
                   hf_split=task_cfg.get("hf_split", "test"), profile=profile)

    def files(self) -> list[tuple[str, str]]:
        """(name, code) of the code files the haystacks are made of."""
        if self._files is None:
            if self.source == "stdlib":
                self._files = list(stdlib_sources())
            elif self.source == "jsonl":
                if not self.data_path:
                    raise ValueError("task.source=jsonl needs task.data_path=FILE (field context)")
                rows = read_jsonl(self.data_path, {"context": str})
                self._files = [(f"line{r['_line']}", r["context"]) for r in rows]
            else:
                self._files = [(r.source, r.context) for r in load_lcc_hf(self.hf_dataset, self.hf_split)]
        return self._files

    def haystack(self, case: CodeKeyCase, tokenizer, min_tokens: int) -> str:
        """Code files in the case's seeded order, joined until they exceed ``min_tokens`` tokens."""
        files = self.files()
        order = list(range(len(files)))
        random.Random(case.file_seed).shuffle(order)
        parts: list[str] = []
        size, ratio = 0, None
        for idx in order:
            path, code = files[idx]
            code = collapse_newlines(code).rstrip("\n") + "\n"
            parts.append(FILE_HEADER.format(path=path) + code + "\n")
            size += len(parts[-1])
            if ratio is None:
                ratio = chars_per_token(tokenizer, parts[-1])
            if size > 1.2 * min_tokens * ratio and count_tokens(tokenizer, "".join(parts)) > min_tokens:
                return "".join(parts)
        raise ValueError(f"all {len(files)} code files together have fewer than {min_tokens} tokens")

    def build(self, case: CodeKeyCase, haystack: str, anchors: list[int], n_chars: int) -> str:
        """The prompt with the first ``n_chars`` characters of ``haystack`` (cut back to a line end)."""
        hay = haystack[:n_chars]
        hay = hay[: hay.rfind("\n") + 1]
        usable = anchors[: bisect.bisect_right(anchors, len(hay))] or [0]
        target = case.depth * len(hay)
        j = bisect.bisect_left(usable, target)
        near = [usable[k] for k in (j - 1, j) if 0 <= k < len(usable)]
        insert_at = min(near, key=lambda a: abs(a - target))
        return code_key_prompt(hay, insert_at, case.key)

    def examples(self, setting: Setting, tokenizer, n: int, seed: int) -> list[Example]:
        """``n`` examples of ``setting.value`` tokens (unit ``tokens``) each."""
        if setting.unit != "tokens":
            raise ValueError(f"code_key settings are in tokens, not {setting.unit!r}")
        target = setting.value
        out = []
        for i, case in enumerate(code_key_cases(n, seed)):
            haystack = self.haystack(case, tokenizer, target)
            anchors = [0] + [m.start() for m in _TOP_LEVEL.finditer(haystack)]
            guess = int(target * chars_per_token(tokenizer, haystack))
            k = largest_fitting(lambda k, c=case, h=haystack, a=anchors:
                                count_tokens(tokenizer, self.build(c, h, a, k)) <= target, len(haystack), guess)
            prompt = self.build(case, haystack, anchors, k)
            actual = count_tokens(tokenizer, prompt)
            if actual > target:
                raise ValueError(f"the code key prompt needs more than {target} tokens")
            meta = {"depth": case.depth, "haystack_chars": k, "source": self.source}
            if self.source == "stdlib":
                meta["python"] = sysconfig.get_python_version()
            out.append(Example(f"{seed}-{i}", prompt, case.key, target, actual, meta))
        return out

    def score(self, output: str, example: Example) -> dict[str, float]:
        """100 when the first integer of the completion is the function's return value, else 0."""
        return {"accuracy": 100.0 * code_key_correct(output, example.target)}
