"""Task registry: one module per task of the papers (docs/design.md §6); each builds examples and scores them."""

from __future__ import annotations

from typing import Any

from lengthx.tasks.base import Example, Setting, Task, all_settings, resolve_settings
from lengthx.tasks.code_completion import CodeCompletionTask
from lengthx.tasks.code_key import CodeKeyTask
from lengthx.tasks.lines import LinesTask
from lengthx.tasks.lm import LMTask
from lengthx.tasks.mdqa import MDQATask
from lengthx.tasks.passkey import PasskeyTask
from lengthx.tasks.segmented_ppl import SegmentedPPLTask
from lengthx.tasks.topics import TopicsTask

TASKS: dict[str, type[Task]] = {
    "passkey": PasskeyTask,
    "lines": LinesTask,
    "topics": TopicsTask,
    "mdqa": MDQATask,
    "code_completion": CodeCompletionTask,
    "code_key": CodeKeyTask,
    "lm": LMTask,
    "segmented_ppl": SegmentedPPLTask,  # paper B
}


def build_task(task_cfg: Any, profile: str = "mini", l_tr: int | None = None) -> Task:
    """The task object named by ``task_cfg.name``, configured from its config and the profile.

    A task that scores the same text at every length (``task.same_text``) learns the sweep's longest
    setting from ``l_tr`` (the model's training length), so ``task.only`` never changes which text a
    setting reads."""
    try:
        cls = TASKS[task_cfg.name]
    except KeyError:
        raise ValueError(f"task {task_cfg.name!r} has a config but no implementation yet; "
                         f"implemented tasks: {', '.join(TASKS)}") from None
    task = cls.from_config(task_cfg, profile=profile)
    if l_tr is not None:
        task.set_training_length(int(l_tr))
    if task.same_text and l_tr is not None:
        task.longest = max(s.value for s in all_settings(task_cfg, profile, int(l_tr)))
    return task


def data_status(task_cfg: Any, profile: str, l_tr: int) -> str:
    """One line for a dry run: the data a job's task reads and whether it is there (docs/design.md §8).

    ``data: MISSING …`` with the problem a run would stop on (the file, where the public one comes from, the fix),
    else ``data: …`` with what each row would name (``lengthx.data.provenance``): a file's name and hash, a hub
    data set (``hub, cached`` or ``hub, downloaded on first use``), or what the task builds itself."""
    from lengthx.data.provenance import GENERATED, SYNTHETIC, hub_dataset_cached

    cls = TASKS.get(str(task_cfg.name))
    if cls is None:
        return f"data: task {task_cfg.name!r} has no implementation"
    try:
        settings = resolve_settings(task_cfg, profile, l_tr)
    except ValueError as err:
        return f"data: MISSING: {err}"
    problem = cls.data_problem(task_cfg, profile, settings)
    if problem:
        return f"data: MISSING: {problem}"
    task = build_task(task_cfg, profile)
    sources = [task.data_source(s) for s in settings]
    if any(source is None for source in sources):
        return "data: read when the run starts (this task names no data before)"
    labels = []
    for label in map(str, sources):
        if label in (GENERATED, SYNTHETIC) or label.startswith("stdlib-") or "@" in label:
            note = {GENERATED: " (built by lengthx, no file)", SYNTHETIC: " (drawn as the benchmark draws it)"}
            labels.append(label + note.get(label, " (there)"))
        else:
            cached = hub_dataset_cached(label.rsplit(":", 1)[0])
            labels.append(f"{label} (hub, {'cached' if cached else 'downloaded on first use'})")
    return "data: " + ", ".join(dict.fromkeys(labels))


__all__ = ["TASKS", "Example", "Setting", "Task", "all_settings", "build_task", "data_status", "resolve_settings"]
