"""Task registry: one module per task of the papers (DESIGN §6); each builds examples and scores them."""

from __future__ import annotations

from typing import Any

from lengthx.tasks.base import Example, Setting, resolve_settings
from lengthx.tasks.code_completion import CodeCompletionTask
from lengthx.tasks.code_key import CodeKeyTask
from lengthx.tasks.lines_task import LinesTask
from lengthx.tasks.lm import LMTask
from lengthx.tasks.mdqa import MDQATask
from lengthx.tasks.passkey import PasskeyTask
from lengthx.tasks.topics import TopicsTask

TASKS: dict[str, type] = {
    "passkey": PasskeyTask,
    "lines": LinesTask,
    "topics": TopicsTask,
    "mdqa": MDQATask,
    "code_completion": CodeCompletionTask,
    "code_key": CodeKeyTask,
    "lm": LMTask,
}


def build_task(task_cfg: Any, profile: str = "mini") -> Any:
    """The task object named by ``task_cfg.name``, configured from its config and the profile."""
    try:
        cls = TASKS[task_cfg.name]
    except KeyError:
        raise ValueError(f"task {task_cfg.name!r} has a config but no implementation yet; "
                         f"implemented tasks: {', '.join(TASKS)}") from None
    if hasattr(cls, "from_config"):
        return cls.from_config(task_cfg, profile=profile)
    return cls(max_new_tokens=int(task_cfg.max_new_tokens))


__all__ = ["TASKS", "Example", "Setting", "build_task", "resolve_settings"]
