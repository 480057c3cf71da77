"""Task registry: one module per task of the papers (docs/design.md §6); each builds examples and scores them."""

from __future__ import annotations

from typing import Any

from lengthx.tasks.base import Example, Setting, all_settings, resolve_settings
from lengthx.tasks.code_completion import CodeCompletionTask
from lengthx.tasks.code_key import CodeKeyTask
from lengthx.tasks.lines import LinesTask
from lengthx.tasks.lm import LMTask
from lengthx.tasks.mdqa import MDQATask
from lengthx.tasks.passkey import PasskeyTask
from lengthx.tasks.segmented_ppl import SegmentedPPLTask
from lengthx.tasks.topics import TopicsTask

TASKS: dict[str, type] = {
    "passkey": PasskeyTask,
    "lines": LinesTask,
    "topics": TopicsTask,
    "mdqa": MDQATask,
    "code_completion": CodeCompletionTask,
    "code_key": CodeKeyTask,
    "lm": LMTask,
    "segmented_ppl": SegmentedPPLTask,  # paper B
}


def build_task(task_cfg: Any, profile: str = "mini", l_tr: int | None = None) -> Any:
    """The task object named by ``task_cfg.name``, configured from its config and the profile.

    A task that scores the same text at every length (``task.same_text``) learns the sweep's longest
    setting from ``l_tr`` (the model's training length), so ``task.only`` never changes which text a
    setting reads."""
    try:
        cls = TASKS[task_cfg.name]
    except KeyError:
        raise ValueError(f"task {task_cfg.name!r} has a config but no implementation yet; "
                         f"implemented tasks: {', '.join(TASKS)}") from None
    task = cls.from_config(task_cfg, profile=profile) if hasattr(cls, "from_config") \
        else cls(max_new_tokens=int(task_cfg.max_new_tokens))
    if hasattr(task, "set_training_length") and l_tr is not None:
        task.set_training_length(int(l_tr))
    if getattr(task, "same_text", False) and l_tr is not None:
        task.longest = max(s.value for s in all_settings(task_cfg, profile, int(l_tr)))
    return task


__all__ = ["TASKS", "Example", "Setting", "all_settings", "build_task", "resolve_settings"]
