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

from lengthx.core.store.files import append_bytes, make_dirs, refuse_link

log = logging.getLogger("lengthx")

SOURCES = "sources.jsonl"


def job_overrides() -> list[str] | None:
    """The overrides of the Hydra job this process runs (a ``lengthx run`` / ``stats`` job), or None outside one."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return [str(o) for o in HydraConfig.get().overrides.task]


def job_cwd() -> str:
    """The directory the command was started in (a relative ``model.path`` of its overrides is relative to it)."""
    from hydra.core.hydra_config import HydraConfig

    return str(HydraConfig.get().runtime.cwd) if HydraConfig.initialized() else str(Path.cwd())


def other_checkpoint(root: Path, name: str, path: str) -> str | None:
    """The checkpoint directory of another model already stored under the model name ``name`` (an own model,
    ``model=hf``, named after its directory), or None: a recorded command whose ``model.path`` is another directory
    holding other weights (or gone). Two such models would share cell keys, and the tables show only the newest."""
    from lengthx.models.loading import model_fingerprint

    here = Path(path).expanduser().resolve()
    for entry in read_sources(root).values():
        if not str(entry.get("cell", "")).startswith(f"{name}|"):
            continue
        given = [o.split("=", 1)[1] for o in entry.get("overrides") or () if o.lstrip("+").startswith("model.path=")]
        if not given:
            continue
        there = (Path(str(entry.get("cwd") or ".")) / Path(given[-1]).expanduser()).resolve()
        if there != here and (not there.is_dir() or model_fingerprint(str(there)) != model_fingerprint(str(here))):
            return str(there)
    return None


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
        cwd = job_cwd()
        lines = [json.dumps({"config_hash": h, "cell": c, "command": command, "overrides": overrides, "cwd": cwd},
                            ensure_ascii=False) + "\n"
                 for c, h in dict.fromkeys(cells) if h not in known]
        if lines:
            path = store.root / SOURCES
            refuse_link(path)
            append_bytes(path, "".join(lines).encode("utf-8"))
    return len(lines)


def check_own_name(model: Any, root: Path) -> None:
    """Refuse (:class:`lengthx.errors.UsageError`, naming both directories) an own model (``model=hf``) whose name
    the store at ``root`` already holds for another checkpoint (:func:`other_checkpoint`)."""
    from lengthx.errors import UsageError

    if not (model.get("own") and model.get("path")):
        return
    other = other_checkpoint(root, str(model.name), str(model.path))
    if other is not None:
        raise UsageError(f"model.name={model.name} is taken in {root} by {other}, another checkpoint than "
                         f"{model.path}: two models under one name would share cells. Fix: model.name=<a name of its "
                         "own> (or another results_dir)")
