"""What the public API reads and builds besides models (docs/api.md): the shipped minis, a task's examples at an
exact token length (docs/design.md §6), a results directory as a pandas DataFrame (docs/results.md) and a
training run's curve (``metrics.jsonl``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lengthx.config import PACKAGE_DIR, compose, results_dir_problem
from lengthx.core.store import ResultsStore
from lengthx.report.tables.render import latest_ok
from lengthx.segmented.metrics import read_curve
from lengthx.tasks import Example, build_task
from lengthx.tasks.base import Setting, explicit_label

if TYPE_CHECKING:
    import pandas as pd
    from transformers import PreTrainedTokenizerBase

MINIS_DIR = PACKAGE_DIR / "checkpoints"


def mini_path(name: str) -> Path:
    """The directory of a mini checkpoint shipped with lengthx (``mini-t5``, the Flan-T5 stand-in of paper A;
    ``mini-t5-lm``; ``mini-gpt2``, ``mini-pythia``, ``mini-bloom`` for paper B): ``from_pretrained`` reads it."""
    path = MINIS_DIR / name
    if not (path / "config.json").is_file():
        shipped = sorted(p.name for p in MINIS_DIR.iterdir() if (p / "config.json").is_file())
        raise ValueError(f"no shipped mini named {name!r}; shipped: {', '.join(shipped)}")
    return path


def task_examples(task: str, tokenizer: PreTrainedTokenizerBase, length: int, n: int = 1, seed: int = 0,
                  profile: str = "mini") -> list[Example]:
    """``n`` examples of a paper-A task (``passkey``, ``lines``, ``topics``, ``mdqa``, ``code_completion``,
    ``code_key``, ``lm``) whose prompts are ``length`` tokens of ``tokenizer`` (fitted by bisection, as
    ``lengthx run task.settings=[length] task.unit=tokens``), seeded: ``.prompt``, ``.target`` and
    ``.actual_tokens`` of each. ``profile=mini`` builds them offline (generated or standard-library data)."""
    if task == "segmented_ppl":
        raise ValueError("segmented_ppl scores whole documents (paper B), it has no prompts: use a paper-A task")
    cfg = compose([f"task={task}", f"profile={profile}", f"task.settings=[{int(length)}]", "task.unit=tokens"])
    built = build_task(cfg.task, profile, int(length))
    return built.examples(Setting(explicit_label(int(length), "tokens"), int(length), "tokens"), tokenizer,
                          int(n), int(seed))


def read_results(results_dir: str | Path, latest: bool = True) -> pd.DataFrame:
    """A results directory's ``results.csv`` (``lengthx run``, ``stats``; docs/results.md) as a DataFrame, one
    row per (cell, metric): with ``latest``, the newest ``ok`` row of each with numeric ``value`` (what the
    tables and figures show); without, every row as stored, status rows included. A path that does not exist,
    or is a file, is a FileNotFoundError naming it (a directory without results gives an empty frame)."""
    problem = results_dir_problem(results_dir)
    if problem is not None:
        raise FileNotFoundError(problem)
    df = ResultsStore(Path(results_dir)).read()
    return latest_ok(df) if latest else df


def read_training_metrics(run_dir: str | Path) -> pd.DataFrame:
    """A ``lengthx train`` run's ``metrics.jsonl`` as a DataFrame: one row per logged step with ``step``,
    ``loss``, ``lr``, ``tokens``, ``tokens_per_s`` and ``seconds`` (empty when the run has no curve)."""
    import pandas as pd

    rows = read_curve(run_dir)
    return pd.DataFrame(rows, columns=list(rows[0]) if rows else
                        ["step", "loss", "lr", "tokens", "tokens_per_s", "seconds"])
