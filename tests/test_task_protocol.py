"""What a task provides (lengthx.tasks.base.Task, docs/design.md §6): every registered task declares it, and the
package reads a task's attributes directly."""

from __future__ import annotations

from pathlib import Path

from lengthx.tasks import TASKS


def test_every_task_declares_what_it_provides():
    """Each registered task is a :class:`lengthx.tasks.base.Task` under its name, with the methods its scoring
    rule calls, and the package reads a task's attributes directly, never through a fallback."""
    import re

    from lengthx.tasks import Task

    for name, cls in TASKS.items():
        assert issubclass(cls, Task) and cls.name == name and cls.metrics, name
        assert cls.units and all(isinstance(u, str) for u in cls.units), name
        assert cls.scoring in ("generation", "likelihood", "perplexity"), name
        if cls.scoring == "generation":
            assert cls.score is not Task.score and cls.examples is not Task.examples, name
        if cls.scoring == "likelihood":
            assert callable(getattr(cls, "evaluate", None)), name
    fallback = re.compile(r"(getattr|hasattr)\((self\.)?(task|cls|TASKS\.get\([^)]*\))\b")
    package = Path(__file__).resolve().parents[1] / "lengthx"
    found = [f"{p.relative_to(package)}:{n}" for p in package.rglob("*.py")
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if fallback.search(line)]
    assert not found
