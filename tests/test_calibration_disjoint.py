"""Algorithm 1's calibration examples are never evaluation examples (docs/design.md §5), in every task; the
evaluation examples themselves do not change where they left room for calibration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import ByT5Tokenizer

from lengthx.core.cells import config_hash
from lengthx.core.runner import Runner
from lengthx.models.minis import compose_run
from lengthx.tasks import Setting
from lengthx.tasks.code_completion import CodeCompletionTask
from lengthx.tasks.mdqa import MDQATask

pytestmark = pytest.mark.usefixtures("one_thread")


def _runner(tiny_model_dir: str, tmp_path: Path, *overrides: str) -> Runner:
    return Runner(compose_run(["method=pmax", f"model.path={tiny_model_dir}", f"results_dir={tmp_path}",
                               *overrides]))


def _items(examples, key: str) -> set:
    return {e.meta[key] for e in examples}


def test_mdqa_calibration_questions_are_not_evaluation_questions(tiny_model_dir, tmp_path):
    common = ["task=mdqa", "task.generated_records=12", "task.settings=[10]", "task.unit=docs"]
    runner = _runner(tiny_model_dir, tmp_path, *common, "task.num_examples=10", "calibration.num_examples=2")
    setting = runner.settings()[0]
    evaluation = runner.evaluation_examples(setting)
    calibration = runner.calibration_examples(setting, 2)
    assert len(evaluation) == 10 and len(calibration) == 2
    assert not _items(calibration, "record") & _items(evaluation, "record")
    # the evaluation is the one it always was: 10 of 12 questions, seeded by the task seed
    assert [e.prompt for e in evaluation] == [e.prompt for e in runner.examples(setting)]
    with pytest.raises(ValueError, match=r"needs 3 calibration examples that are not evaluation examples.*Fix:"):
        runner.calibration_examples(setting, 3)
    # every question asked for (the paper profile): CALIBRATION_RESERVE (at most half the pool) is left out
    runner = _runner(tiny_model_dir, tmp_path, *common, "task.num_examples=20", "calibration.num_examples=5")
    evaluation = runner.evaluation_examples(setting)
    calibration = runner.calibration_examples(setting, 5)
    assert len(evaluation) == 7 and len(calibration) == 5
    assert _items(evaluation, "record") | _items(calibration, "record") == set(range(12))
    with pytest.raises(ValueError, match=r"needs 6 calibration examples that are not evaluation examples.*Fix:"):
        runner.calibration_examples(setting, 6)


def test_code_completion_calibration_rows_are_not_evaluation_rows(tiny_model_dir, tmp_path):
    rows = [{"context": "x = 1\n" + f"y{k} = 2\n" * (40 + k), "gt": f"z{k} = 3"} for k in range(8)]
    data = tmp_path / "lcc.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runner = _runner(tiny_model_dir, tmp_path, "task=code_completion", f"task.data_path={data}",
                     "task.settings=[200]", "task.unit=tokens", "task.num_examples=5")
    setting = runner.settings()[0]
    evaluation = runner.evaluation_examples(setting)
    calibration = runner.calibration_examples(setting, 3)
    assert len(evaluation) == 5 and len(calibration) == 3
    assert not _items(calibration, "source") & _items(evaluation, "source")


def test_stdlib_code_draws_skip_the_excluded_lines():
    tok = ByT5Tokenizer()
    task = CodeCompletionTask(stdlib_split="test")
    setting = Setting("1k", 300, "tokens")
    first = task.examples(setting, tok, 3, seed=0)
    again = task.examples(setting, tok, 3, seed=0, exclude=_items(first, "source"))  # the same seed: all excluded
    assert len(again) == 3 and not _items(again, "source") & _items(first, "source")
    assert [e.prompt for e in task.examples(setting, tok, 3, seed=0, exclude=())] == [e.prompt for e in first]


def test_pool_tasks_evaluation_without_reserve_is_unchanged(tmp_path):
    """Called as before (no ``reserve``), a task returns every question when more are asked for."""
    tok = ByT5Tokenizer()
    task = MDQATask(generated_records=4)
    ex = task.examples(Setting("10docs@0", 10, "docs"), tok, 9, seed=0)
    assert sorted(_items(ex, "record")) == [0, 1, 2, 3]


def test_cells_whose_calibration_examples_changed_get_a_new_hash(tmp_path, monkeypatch):
    """MDQA's and code completion's aligned cells are recomputed; their τ = 1 cells and other tasks' keep
    their hash."""
    def hashes(task: str, method: str) -> tuple[str, str]:
        cfg = compose_run([f"task={task}", f"method={method}", f"results_dir={tmp_path}"])
        setting = Setting("s", 100, "tokens")
        return config_hash(cfg, setting), cfg

    mdqa_pmax, cfg = hashes("mdqa", "pmax")
    mdqa_none, cfg_none = hashes("mdqa", "none")
    monkeypatch.delattr(MDQATask, "calibration_item")
    assert config_hash(cfg, Setting("s", 100, "tokens")) != mdqa_pmax
    assert config_hash(cfg_none, Setting("s", 100, "tokens")) == mdqa_none
