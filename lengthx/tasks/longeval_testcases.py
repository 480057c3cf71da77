"""LongEval's released test cases (Li et al. 2023; github.com/DachengLi1/LongChat, ``longeval/evaluation/``), the
files its ``eval.py`` evaluates: ``topics/testcases/{N}_topics.jsonl`` and ``lines/testcases/{N}_lines.jsonl``,
50 cases each at Table 4's settings.

Facts of the released files: a topics case has ``prompt`` and ``topics`` (the first is the answer); a lines case
has ``prompt``, ``expected_number`` (the answer), ``random_idx`` ([asked index, its position]) and ``num_lines``.
Their prompts are not the generator's current wording (topics ask "What is the first topic we discussed?", and
from 15 topics the header says "retrieve the first topic name."; every lines prompt ends "I need the number. "
with a trailing space): ``eval.py`` sends them as they are, and so does
lengthx, byte for byte. ``eval.py`` scores lines by the last integer of the output, as the generated records
are scored; for topics it only writes the output beside the first topic, for a GPT judge
(``auto_topic_eval.py``), so lengthx scores them as it scores generated topics.

``task.testcases_dir`` names the folder of one task's files (``{N}_{task}.jsonl`` in it) or LongEval's
``evaluation/`` folder (``{task}/testcases/{N}_{task}.jsonl`` below it). The released cases are the evaluation's;
Algorithm 1's calibration records and its length-L_tr reference are drawn by the task's generator (seeded apart),
so they are never evaluation cases.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lengthx.data.jsonl import read_jsonl

SOURCE = ("LongEval's released test cases (github.com/DachengLi1/LongChat, "
          "longeval/evaluation/{task}/testcases/{n}_{task}.jsonl)")
# the fields each task reads from a case, with their types
FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "topics": {"prompt": str, "topics": list},
    "lines": {"prompt": str, "expected_number": int},
}


def testcase_path(testcases_dir: str | Path, task: str, n: int) -> Path:
    """The file of ``n`` topics or lines under ``testcases_dir``: ``{n}_{task}.jsonl`` in it, else LongEval's layout
    ``{task}/testcases/{n}_{task}.jsonl`` below it (the first one that exists; the first when neither does)."""
    name = f"{n}_{task}.jsonl"
    candidates = [Path(testcases_dir) / name, Path(testcases_dir) / task / "testcases" / name]
    return next((p for p in candidates if p.is_file()), candidates[0])


def read_testcases(path: str | Path, task: str) -> list[dict[str, Any]]:
    """The cases of one released file, in file order, each checked for the fields ``task`` reads and, in a file
    named ``{N}_{task}.jsonl``, for N topics (or lines, where a case says ``num_lines``): its cells are
    labelled N, so a case of another count would be reported under the wrong setting."""
    rows = read_jsonl(path, FIELDS[task])
    if not rows:
        raise ValueError(f"{path} holds no test cases")
    if task == "topics":
        bad = next((r["_line"] for r in rows if not r["topics"] or not all(isinstance(t, str) for t in r["topics"])),
                   None)
        if bad is not None:
            raise ValueError(f"{path}, line {bad}: field 'topics' should be a non-empty list of strings")
    named = re.fullmatch(rf"(\d+)_{task}\.jsonl", Path(path).name)
    if named is not None:
        n = int(named.group(1))
        for r in rows:
            count = len(r["topics"]) if task == "topics" else r.get("num_lines", n)
            if count != n:
                raise ValueError(f"{path}, line {r['_line']}: a case of {count} {task} in the file of {n} {task} "
                                 f"({Path(path).name}), whose cells are labelled {n}{task}. Fix: restore the "
                                 f"released file ({SOURCE.format(task=task, n=n)}), or name it {count}_{task}.jsonl")
    return rows


def testcases_problem(task_cfg: Any, task: str, unit: str, settings: list[Any] | None) -> str | None:
    """Why ``task.testcases_dir`` cannot give every setting its cases, or ``None`` (also when it is not set): the
    settings must count topics or lines (the released files' unit), and each one's file must exist and hold
    cases of its count (:func:`read_testcases`)."""
    folder = task_cfg.get("testcases_dir")
    if not folder:
        return None
    if not Path(str(folder)).is_dir():
        return (f"task.testcases_dir={folder}: no such directory. Fix: point it at the folder of "
                f"{SOURCE.format(task=task, n='N')}, or LongEval's evaluation/ folder")
    for s in settings or []:
        if s.unit != unit:
            return (f"task.testcases_dir holds {task} per number of {unit}, but setting {s.label} is {s.value} "
                    f"{s.unit}. Fix: use profile=paper (settings in {unit}), or task.settings=[…] task.unit={unit}, "
                    "or drop task.testcases_dir")
        path = testcase_path(str(folder), task, s.value)
        if not path.is_file():
            return (f"task.testcases_dir={folder} has no {path.name} for setting {s.label} (looked for {path} and "
                    f"{Path(str(folder)) / task / 'testcases' / path.name}). Fix: point it at "
                    f"{SOURCE.format(task=task, n=s.value)}")
        try:
            read_testcases(path, task)  # every case of the file's count, before any work
        except ValueError as err:
            return str(err)
    return None
