"""Code key retrieval (paper A §5.4, after Code Llama's key retrieval, Rozière et al. 2023).

Benchmark facts (docs/design.md §6): several real code files are concatenated, a special function that only
returns an integer in 1..100 is placed among them at a random depth, and the prompt ends by asking for that
integer; the paper reports 100 cases at about 16k CodeT5+ tokens (L_tr = 768). The score is whether the
integer matches (the first integer of the completion).

Our format (the paper does not print one): files are joined with a ``# file: <path>`` comment line, the
key function is inserted before a file or a top-level statement (found with Python's ``tokenize``; never
between a decorator and its function) nearest to the chosen depth, and the prompt ends with an ``assert``
line for the model to complete::

    def special_function() -> int:
        \"\"\"Only returns an integer.\"\"\"
        return 42
    ...
    assert special_function() ==

Code: the standard library's own sources offline (``task.source=stdlib``, the mini default), or LCC
contexts (``hf``: ``microsoft/LCC_python``; ``jsonl``: a local file with a ``context`` field). Lengths are
fitted to the requested token count with the model's tokenizer by bisection on the haystack size, cut
after a physical line; a string or bracket left open by the cut is closed (its quotes, ``)``, ``]``, ...)
so that the question stays code.
"""

from __future__ import annotations

import bisect
import io
import random
import sysconfig
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lengthx.data.corpora import stdlib_sources
from lengthx.data.fitting import chars_per_token, count_tokens, largest_fitting
from lengthx.data.jsonl import read_jsonl
from lengthx.data.provenance import stdlib_label
from lengthx.tasks.base import Example, Setting, Task
from lengthx.tasks.code_completion import (
    LCC_DATASET,
    code_data_label,
    code_data_problem,
    drop_blank_lines,
    load_lcc_hf,
    resolve_source,
)
from lengthx.tasks.metrics import code_key_correct

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

FUNCTION_NAME = "special_function"
KEY_FUNCTION = (
    "def {name}() -> int:\n"
    '    """Only returns an integer."""\n'
    "    return {key}\n"
)
QUESTION = "assert {name}() == "
FILE_HEADER = "# file: {path}\n"
MAX_KEY = 100
_CLOSE = {"(": ")", "[": "]", "{": "}"}
TRIPLE_QUOTES = ('"' * 3, "'" * 3)


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
    tail = "" if not after or after.endswith("\n") else "\n"
    return before + sep + key_function(key, name) + "\n" + after + tail + QUESTION.format(name=name)


def _string_closer(token: str) -> str:
    """The quotes that end a string token (triple or single, after its r/b/u/f prefix)."""
    body = token.lstrip("rRbBuUfF")
    return body[:3] if body[:3] in TRIPLE_QUOTES else body[:1]


def _token_marks(code: str, offset: Callable[[tuple[int, int]], int]) -> tuple[
        list[int], list[tuple[int, str]], list[tuple[int, int, str]], list[tuple[int, int]], list[tuple[int, int]], int]:
    """One pass of Python's tokenizer over ``code`` for :func:`code_points`: (anchors, brackets, multi-line
    strings, f-string spans, block-header spans, the offset up to which the file tokenised)."""
    anchors: list[int] = []
    brackets: list[tuple[int, str]] = []  # (offset, opener or closer) outside f-strings
    strings: list[tuple[int, int, str]] = []  # (start, end, closing quotes) of multi-line strings
    blocked: list[tuple[int, int]] = []  # f-string spans (Python >= 3.12 tokenises their insides)
    fstart, fend = getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None)
    open_f: list[int] = []
    headers: list[tuple[int, int]] = []  # from a block header's end ("if x:") to its body's first token
    new_line, prev_first, last_ok, last_sig = True, "", 0, ""
    header_end: int | None = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            a, b = offset(tok.start), offset(tok.end)
            if tok.type == tokenize.NEWLINE and last_sig == ":":
                header_end = b
            if tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE, tokenize.INDENT,
                                tokenize.DEDENT):
                last_sig = tok.string
                if header_end is not None:
                    headers.append((header_end, a))
                    header_end = None
            if fstart is not None and tok.type == fstart:
                open_f.append(a)
            elif fend is not None and tok.type == fend and open_f:
                blocked.append((open_f.pop(), b))
            elif tok.type == tokenize.OP and tok.string in "()[]{}" and not open_f:
                brackets.append((a, tok.string))
            elif tok.type == tokenize.STRING and tok.start[0] != tok.end[0]:
                strings.append((a, b, _string_closer(tok.string)))
            last_ok = b
            if tok.type in (tokenize.NEWLINE, tokenize.NL):
                new_line = new_line or tok.type == tokenize.NEWLINE
            elif tok.type in (tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
                continue
            elif new_line:
                if tok.start[1] == 0 and prev_first != "@":
                    anchors.append(a)
                prev_first, new_line = tok.string, False
    except (tokenize.TokenError, SyntaxError):
        pass
    return anchors, brackets, strings, blocked, headers, last_ok


def code_points(code: str) -> tuple[list[tuple[int, str]], list[int]]:
    """Where a Python file may be cut and where a function may be inserted, from Python's tokenizer.

    Returns ``(cuts, anchors)``. A cut is ``(offset, closing)``: the file may end at ``offset`` (just after a
    physical line) when followed by ``closing``, the text that closes what is open there (a multi-line
    string's quotes, then brackets, then a newline), so that a following line stays code; cuts after a
    block header (``if x:``), a backslash continuation or inside an f-string are left out. Anchors are the starts of top-level
    statements (column 0) that do not follow a decorator line. A file that does not tokenise to its end
    (an LCC prefix, say) keeps the points found before the problem.
    """
    line_starts = [0] + [i + 1 for i, ch in enumerate(code) if ch == "\n"]

    def offset(pos: tuple[int, int]) -> int:
        return line_starts[pos[0] - 1] + pos[1]

    anchors, brackets, strings, blocked, headers, last_ok = _token_marks(code, offset)
    cuts: list[tuple[int, str]] = []
    stack: list[str] = []
    bi = si = hi = fi = 0
    blocked.sort()
    for end in line_starts[1:]:
        if end > last_ok:
            break
        while bi < len(brackets) and brackets[bi][0] < end:
            ch = brackets[bi][1]
            if ch in _CLOSE:
                stack.append(_CLOSE[ch])
            elif stack:
                stack.pop()
            bi += 1
        while si < len(strings) and strings[si][1] <= end:
            si += 1
        while hi < len(headers) and headers[hi][1] < end:
            hi += 1
        while fi < len(blocked) and blocked[fi][1] <= end:
            fi += 1
        if (code.endswith("\\\n", 0, end) or (fi < len(blocked) and blocked[fi][0] < end)
                or (hi < len(headers) and headers[hi][0] <= end)):
            continue
        closing = strings[si][2] if si < len(strings) and strings[si][0] < end else ""
        closing += "".join(reversed(stack))
        cuts.append((end, closing + "\n" if closing else ""))
    return cuts, anchors


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


class CodeKeyTask(Task):
    """Code key retrieval as a runnable task: fitted haystacks of real code, first-integer scoring."""

    name = "code_key"
    metrics = ("accuracy",)
    units = ("tokens",)  # what task.unit may name (the unit of explicit task.settings)
    paper_data = f"{LCC_DATASET} code files (Hugging Face hub, test split)"
    stand_in = {"stdlib": "the Python standard library's own source files"}

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

    @staticmethod
    def data_problem(task_cfg: Any, profile: str, settings: list[Setting] | None = None) -> str | None:
        """Why this config cannot read its code files, or ``None``."""
        return code_data_problem("code_key", task_cfg, profile, "context")

    def data_source(self, setting: Setting) -> str:
        """The code files' source (lengthx.data.provenance)."""
        return code_data_label(self.source, self.data_path, self.hf_dataset, self.hf_split, stdlib_label("code"))

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

    def haystack(self, case: CodeKeyCase, tokenizer: PreTrainedTokenizerBase, min_tokens: int
                 ) -> tuple[str, list[tuple[int, str]], list[int]]:
        """Code files in the case's seeded order, joined until they exceed ``min_tokens`` tokens.

        Returns (text, cuts, anchors): where the haystack may end, with the text that closes what is open
        there (see :func:`code_points`), and where the key function may go (before a file or a top-level
        statement)."""
        files = self.files()
        order = list(range(len(files)))
        random.Random(case.file_seed).shuffle(order)
        parts: list[str] = []
        cuts: list[tuple[int, str]] = []
        anchors: list[int] = []
        size, ratio = 0, None
        for idx in order:
            path, code = files[idx]
            code = drop_blank_lines(code).rstrip("\n") + "\n"
            header = FILE_HEADER.format(path=path)
            file_cuts, file_anchors = code_points(code)
            base = size + len(header)
            anchors += [size] + [base + a for a in file_anchors if a > 0]
            cuts += [(base + c, closing) for c, closing in file_cuts] + [(base + len(code) + 1, "")]
            parts.append(header + code + "\n")
            size += len(parts[-1])
            if ratio is None:
                ratio = chars_per_token(tokenizer, parts[-1])
            if size > 1.2 * min_tokens * ratio and count_tokens(tokenizer, "".join(parts)) > min_tokens:
                return "".join(parts), sorted(set(cuts)), sorted(set(anchors))
        raise ValueError(f"all {len(files)} code files together have fewer than {min_tokens} tokens")

    @staticmethod
    def build(case: CodeKeyCase, haystack: str, anchors: list[int], cut: tuple[int, str]) -> str:
        """The prompt with ``haystack`` cut at ``cut`` (and closed there) and the key function at the
        anchor nearest to the case's depth."""
        end, closing = cut
        hay = haystack[:end] + closing
        usable = anchors[: bisect.bisect_right(anchors, end)] or [0]
        target = case.depth * end
        j = bisect.bisect_left(usable, target)
        near = [usable[k] for k in (j - 1, j) if 0 <= k < len(usable)]
        insert_at = min(near, key=lambda a: abs(a - target))
        return code_key_prompt(hay, insert_at, case.key)

    def examples(self, setting: Setting, tokenizer: PreTrainedTokenizerBase, n: int, seed: int) -> list[Example]:
        """``n`` examples of ``setting.value`` tokens (unit ``tokens``) each."""
        if setting.unit != "tokens":
            raise ValueError(f"code_key settings are in tokens, not {setting.unit!r}")
        target = setting.value
        out = []
        for i, case in enumerate(code_key_cases(n, seed)):
            haystack, cuts, anchors = self.haystack(case, tokenizer, target)

            def fits(k: int, c: CodeKeyCase = case, h: str = haystack, a: list[int] = anchors,
                     cs: list[tuple[int, str]] = cuts) -> bool:
                return count_tokens(tokenizer, self.build(c, h, a, cs[k - 1] if k else (0, ""))) <= target

            guess = bisect.bisect_left(cuts, (int(target * chars_per_token(tokenizer, haystack)), ""))
            k = largest_fitting(fits, len(cuts), guess)
            cut = cuts[k - 1] if k else (0, "")
            prompt = self.build(case, haystack, anchors, cut)
            actual = count_tokens(tokenizer, prompt)
            if actual > target:
                raise ValueError(f"the code key prompt needs more than {target} tokens")
            meta = {"depth": case.depth, "haystack_chars": cut[0], "closing": cut[1], "source": self.source}
            if self.source == "stdlib":
                meta["python"] = sysconfig.get_python_version()
            out.append(Example(f"{seed}-{i}", prompt, case.key, target, actual, meta))
        return out

    def score(self, output: str, example: Example) -> dict[str, float]:
        """100 when the first integer of the completion is the function's return value, else 0."""
        return {"accuracy": 100.0 * code_key_correct(output, example.target)}
