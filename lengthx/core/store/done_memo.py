"""A run whose every cell is done, answered without loading a model, a tokenizer or a task (docs/results.md).

A cell's hash (:func:`lengthx.core.cells.cell_hash`) holds what decides its numbers, the task's behaviour among
them: a few seeded prompts built with the model's tokenizer. Computing it loads torch, transformers, the
tokenizer and the task's data, seconds before a run can say that it has nothing to do. So a run keeps, in
``<results_dir>/.cache/cells/<key>.json``, the (cell, hash) pairs it computed, under a key of everything those
hashes are made of (:func:`memo_key`):

- the run's resolved config (without Hydra's own section) and the working directory (relative paths);
- every file of the lengthx package (the task and scorer code, the configs), of the checkpoint directory
  ``model.path`` (weights, tokenizer, config) and of the data files and folders the task config names, each
  by its version (size, modification and change times, inode): any write changes it;
- the installed distributions and their versions (their ``.dist-info`` folders on ``sys.path``), the Python
  that runs, and the ``LENGTHX_*`` environment variables.

A later run with the same key has the same hashes, so when the store holds every one of its cells done
(:func:`finished_cells`), it prints what a run would and stops. Anything else takes the full path: a key not
seen before, a checkpoint not in a local directory (a hub id), data from the hub (its cache may change under
the same name), a ``results.csv`` that is not sound and unchanged since it was last read in full (a torn last
row, a row set aside: the full path repairs it), a cell not done. The memo only ever skips work; it never
decides a number.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthx.core.store.results import ResultsStore, refuse_link, write_json

MEMO_DIR = Path(".cache") / "cells"
PACKAGE = Path(__file__).resolve().parents[2]  # lengthx/
PACKAGE_SKIPPED = "checkpoints"  # the checkpoint a run uses is versioned as its model.path
UNKEYED_ENV = ("LENGTHX_SWEEP_JOBS",)  # set by the command itself for its estimate


def _versions(root: Path) -> Iterator[str]:
    """One line per file under ``root`` (a file or a folder, walked): its path and version."""
    if root.is_file():
        walk: Iterable[tuple[str, list[str], list[str]]] = [(str(root.parent), [], [root.name])]
    else:
        walk = os.walk(root)
    for folder, dirs, files in walk:
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (d == PACKAGE_SKIPPED and Path(folder) == PACKAGE))
        for name in sorted(files):
            try:
                st = os.stat(Path(folder) / name)
            except OSError:
                continue
            yield f"{folder}/{name}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"


def _paths(value: Any) -> Iterator[Path]:
    """The existing files and folders named by the strings of a config section."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _paths(v)
    elif isinstance(value, list):
        for v in value:
            yield from _paths(v)
    elif isinstance(value, str) and value and len(value) < 4096:
        try:
            path = Path(value).expanduser()
            if path.exists():
                yield path.resolve()
        except (OSError, ValueError):
            return


def _distributions() -> Iterator[str]:
    """The installed distributions, by the names of their metadata folders (which carry their versions)."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        yield from sorted(f"{entry}/{n}" for n in names if n.endswith((".dist-info", ".egg-info", ".pth")))


def memo_key(cfg: DictConfig) -> str | None:
    """The key a run's cell hashes are kept under (the module's docstring lists what enters it), or None when a
    run of this config is never answered from the memo: no local ``model.path``, or a config that does not
    resolve outside the run."""
    path = cfg.model.get("path")
    if not path or not Path(str(path)).is_dir():
        return None
    try:
        container = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - an interpolation only a running Hydra resolves: no memo
        return None
    if not isinstance(container, dict):
        return None
    container.pop("hydra", None)
    h = hashlib.sha256(json.dumps(container, sort_keys=True, default=str).encode())
    lines = [os.getcwd(), sys.version, sys.executable, *_distributions(), *_versions(PACKAGE),
             *_versions(Path(str(path)).resolve())]
    for section in ("task", "data"):
        for data_path in sorted(set(_paths(container.get(section)))):
            lines += _versions(data_path)
    lines += sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("LENGTHX_") and k not in UNKEYED_ENV)
    h.update("\n".join(lines).encode())
    return h.hexdigest()[:32]


def memo_path(results_dir: Path, key: str) -> Path:
    """Where the cell hashes of ``key`` are kept in a results directory."""
    return Path(results_dir) / MEMO_DIR / f"{key}.json"


def local_data(source: str) -> bool:
    """Whether a cell's ``data`` (lengthx.data.provenance) is built here or read from a file the key versions:
    generated or synthetic, the standard library, a file's ``name@sha8``; not a hub data set."""
    return source in ("", "generated", "synthetic") or source.startswith("stdlib-") or "@" in source


def remember(cfg: DictConfig, cells: list[tuple[str, str]], metrics: list[str], n: int, data: list[str]) -> None:
    """Keep the (cell key, hash) pairs a run computed, with the metrics and example count that make a cell of it
    done; nothing for a run the memo cannot answer (:func:`memo_key`, hub data), nor when it cannot be written
    (it is a cache)."""
    if not cells or not all(local_data(d) for d in data):
        return
    key = memo_key(cfg)
    if key is None:
        return
    path = memo_path(Path(str(cfg.results_dir)), key)
    entry = {"cells": [list(c) for c in cells], "metrics": list(metrics), "n": int(n)}
    try:
        refuse_link(path.parent.parent)
        refuse_link(path.parent)
        old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        if old != entry:
            write_json(path, entry)
    except Exception:  # noqa: BLE001 - a cache: a run never stops for it
        return


def finished_cells(cfg: DictConfig) -> list[str] | None:
    """The cell keys of a run whose every cell the store holds done under the hashes an earlier run of the same
    key computed; None when the run must take the full path."""
    key = memo_key(cfg)
    if key is None:
        return None
    store = ResultsStore(Path(str(cfg.results_dir)))
    path = memo_path(store.root, key)
    try:
        refuse_link(path.parent.parent)
        refuse_link(path.parent)
        refuse_link(path)
        entry = json.loads(path.read_text(encoding="utf-8"))
        cells = [(str(c), str(h)) for c, h in entry["cells"]]
        metrics, n = [str(m) for m in entry["metrics"]], int(entry["n"])
    except Exception:  # noqa: BLE001 - no memo, or one that is not ours: the full path
        return None
    rows = store.sound_rows()
    if rows is None or not cells:
        return None
    if not all(store.done_in(rows, cell, chash, metrics, n) for cell, chash in cells):
        return None
    return [cell for cell, _ in cells]
