"""Where each cell of a store came from (docs/results.md, "Current rows"): the command line that computed it.

``sources.jsonl`` beside ``results.csv`` holds one line per cell hash: the cell, the command (``run``) and the Hydra
overrides of the job that computed it, or that found it done. From these, :mod:`lengthx.core.currency` composes the
config again under the current code and checkpoints and tells whether the cell's hash is still what a run would
compute. A run through the Python API has no command line: its cells are recorded with ``overrides`` null.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lengthx.core.store_files import append_bytes, make_dirs, refuse_link

log = logging.getLogger("lengthx")

SOURCES = "sources.jsonl"


def job_overrides() -> list[str] | None:
    """The overrides of the Hydra job this process runs (a ``lengthx run`` / ``stats`` job), or None outside one."""
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:  # pragma: no cover - hydra is a dependency
        return None
    if not HydraConfig.initialized():
        return None
    return [str(o) for o in HydraConfig.get().overrides.task]


def read_sources(root: Path) -> dict[str, dict[str, Any]]:
    """The recorded source of each cell hash of the store at ``root`` (the last line of a hash wins); a line that
    does not parse is named in a warning and skipped."""
    path = Path(root) / SOURCES
    if not path.is_file():
        return {}
    refuse_link(path)
    out: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            out[str(entry["config_hash"])] = entry
        except (ValueError, KeyError, TypeError):
            log.warning("%s: line %d is not a source record; skipped", path, number)
    return out


def record_sources(store: Any, cells: Iterable[tuple[str, str]], overrides: list[str] | None,
                   command: str = "run") -> int:
    """Append the source of each (cell, hash) that ``store`` has no source for yet, under its lock; returns how
    many were written."""
    cells = list(cells)
    if not cells:
        return 0
    make_dirs(store.root)
    with store.lock:
        known = read_sources(store.root)
        lines = [json.dumps({"config_hash": h, "cell": c, "command": command, "overrides": overrides},
                            ensure_ascii=False) + "\n"
                 for c, h in dict.fromkeys(cells) if h not in known]
        if lines:
            path = store.root / SOURCES
            refuse_link(path)
            append_bytes(path, "".join(lines).encode("utf-8"))
    return len(lines)
