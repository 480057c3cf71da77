"""Task registry: one module per task of the papers (DESIGN §6); each builds examples and scores them."""

from __future__ import annotations

from typing import Any

from lengthx.tasks.base import Example, Setting, resolve_settings
from lengthx.tasks.passkey import PasskeyTask

TASKS: dict[str, type] = {"passkey": PasskeyTask}


def build_task(task_cfg: Any) -> Any:
    """The task object named by ``task_cfg.name``, with its generation length."""
    try:
        cls = TASKS[task_cfg.name]
    except KeyError:
        raise ValueError(f"task {task_cfg.name!r} has a config but no implementation yet; "
                         f"implemented tasks: {', '.join(TASKS)}") from None
    return cls(max_new_tokens=int(task_cfg.max_new_tokens))


__all__ = ["TASKS", "Example", "Setting", "build_task", "resolve_settings"]
