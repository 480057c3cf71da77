"""Is every row of a store what the current code and checkpoints would compute? (docs/results.md, "Current rows")

A cell's hash (:func:`lengthx.core.cells.cell_hash`) holds its config, its checkpoint's content and what its task
does at its setting. For each cell the tables show (the newest configuration of each cell key), the command that
computed it (:mod:`lengthx.core.store.sources`) is composed again under the current code, mapped onto the current
shipped checkpoints, and hashed: the same hash is **current**; another is **stale** (a checkpoint, a prompt, a scorer
or a default changed since, and a run of that command would compute the cell afresh). A cell whose inputs are not in
the checkout is **unverifiable**, with why: paper B's cells score trained runs, a cell computed through the Python
API has no command line, and a cell written before sources were recorded has none either (rerunning its command
finds it done and records it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from lengthx.core.frames import rows
from lengthx.core.store import read_json, read_sources, write_json

log = logging.getLogger("lengthx")


@dataclass
class Currency:
    """The verdict on each shown cell of a store: ``stale`` and ``unverifiable`` map cell key → why."""

    current: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)
    unverifiable: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.stale

    def lines(self) -> list[str]:
        """What ``lengthx tables --check`` prints: the stale cells, the unverifiable ones by reason, the counts."""
        out = [f"stale: {cell} ({why})" for cell, why in sorted(self.stale.items())]
        reasons: dict[str, list[str]] = {}
        for cell, why in self.unverifiable.items():
            reasons.setdefault(why, []).append(cell)
        for why, cells in sorted(reasons.items()):
            example = ", ".join(sorted(cells)[:3]) + (", …" if len(cells) > 3 else "")
            out.append(f"unverifiable: {len(cells)} cell(s), {why} (e.g. {example})")
        out.append(f"{len(self.current)} current, {len(self.stale)} stale, {len(self.unverifiable)} unverifiable")
        return out


def shown_cells(df: pd.DataFrame) -> pd.DataFrame:
    """(cell, config_hash, paper, task, setting) of the newest configuration of each cell with ``ok`` rows: what
    the tables show (rows are newest last, docs/results.md)."""
    if df.empty:
        return pd.DataFrame(columns=["cell", "config_hash", "paper", "task", "setting"])
    columns = ["cell", "config_hash", "paper", "task", "setting"]
    ok = df[columns][(df["status"] == "ok").to_numpy()]  # the columns first: a lab's store has ~10^5 cells
    return ok.drop_duplicates("cell", keep="last")


def check_currency(root: Path, df: pd.DataFrame, progress: Callable[[str], None] | None = None) -> Currency:
    """Compose each shown cell's recorded command again and compare hashes (module doc)."""
    sources = read_sources(root)
    verdict = Currency()
    jobs: dict[tuple[str, ...], list[tuple[str, str, str]]] = {}
    for r in rows(shown_cells(df)):
        cell, chash = str(r.cell), str(r.config_hash)
        if str(r.paper) == "B":
            verdict.unverifiable[cell] = ("paper B's cells score runs trained into runs/, which the checkout does not "
                                          "hold; `lengthx run` of its experiment checks them against those runs")
            continue
        source = sources.get(chash)
        if source is None:
            verdict.unverifiable[cell] = ("no record of the command that computed it (written before lengthx recorded "
                                          "one); rerun that command: it finds the cell done and records it")
            continue
        if source.get("overrides") is None:
            verdict.unverifiable[cell] = "computed through the Python API, which has no command line to compose again"
            continue
        jobs.setdefault(tuple(source["overrides"]), []).append((cell, chash, str(r.setting)))
    world = world_key(sources)
    cache_path = Path(root) / ".cache" / "currency.json"
    cached = read_json(cache_path) or {}
    known = cached.get("verdicts", {}) if cached.get("world") == world else {}
    seen: dict[tuple[str, ...], str] = {}  # a task's behaviour at a setting, shared by the jobs of its methods
    todo = {o: [c for c in cells if c[1] not in known] for o, cells in jobs.items()}
    todo = {o: cells for o, cells in todo.items() if cells}
    for k, (overrides, cells) in enumerate(todo.items(), 1):
        if progress is not None:
            progress(f"checking {len(cells)} cell(s) of job {k}/{len(todo)}: {' '.join(overrides)}")
        _check_job(list(overrides), cells, verdict, seen)
    for cells in jobs.values():  # verdicts of unchanged code, checkpoints and commands, from the last check
        for cell, chash, _ in cells:
            if chash in known:
                kind, why = known[chash]
                if kind == "current":
                    verdict.current.append(cell)
                elif kind == "stale":
                    verdict.stale[cell] = why
                else:
                    verdict.unverifiable[cell] = why
    hashes = {cell: chash for cells in jobs.values() for cell, chash, _ in cells}
    verdicts = {**known, **{hashes[c]: ["current", ""] for c in verdict.current if c in hashes},
                **{hashes[c]: ["stale", w] for c, w in verdict.stale.items() if c in hashes},
                **{hashes[c]: ["unverifiable", w] for c, w in verdict.unverifiable.items() if c in hashes}}
    if todo and Path(root).is_dir():
        write_json(cache_path, {"world": world, "verdicts": verdicts})
    return verdict


def world_key(sources: dict[str, dict[str, Any]]) -> str:
    """What a verdict depends on beyond a cell's own hash and command: every file of the lengthx package (code,
    configs, the shipped checkpoints) and of the checkpoint directories the commands name, by version (path,
    size, modification and change times). Any change there checks every cell again."""
    import hashlib

    from lengthx.config import PACKAGE_DIR

    dirs = {PACKAGE_DIR}
    for entry in sources.values():
        for o in entry.get("overrides") or ():
            if o.lstrip("+").startswith("model.path="):
                dirs.add((Path(str(entry.get("cwd") or ".")) / o.split("=", 1)[1]).resolve())
    h = hashlib.sha256()
    for d in sorted(dirs):
        for p in sorted(d.rglob("*")) if d.is_dir() else ():
            if p.is_file() and "__pycache__" not in p.parts:
                st = p.stat()
                h.update(f"{p}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}\n".encode())
    return h.hexdigest()[:16]


def _check_job(overrides: list[str], cells: list[tuple[str, str, str]], verdict: Currency,
               seen: dict[tuple[str, ...], str]) -> None:
    """Compose one job's overrides and hash each of its cells as a run would."""
    import json

    from omegaconf import OmegaConf

    from lengthx.config import compose
    from lengthx.core.cells import cell_hash, task_behaviour
    from lengthx.models.loading import load_tokenizer, model_fingerprint
    from lengthx.models.minis import apply_profile
    from lengthx.tasks import Setting, all_settings, build_task

    try:
        cfg = apply_profile(compose(overrides))
    except Exception as err:  # the command no longer composes: a run of it would not compute these cells
        for cell, _, _ in cells:
            verdict.stale[cell] = f"its command no longer composes: {type(err).__name__}: {str(err)[:200]}"
        return
    path = cfg.model.get("path")
    if path and not Path(str(path)).is_dir():
        for cell, _, _ in cells:
            verdict.unverifiable[cell] = f"its checkpoint {path} is not in this checkout"
        return
    profile, l_tr = str(cfg.profile.name), int(cfg.model.l_tr)
    task = build_task(cfg.task, profile, l_tr)
    tokenizer: Any = None
    fingerprint = model_fingerprint(path)
    task_key = json.dumps(OmegaConf.to_container(cfg.task, resolve=True), sort_keys=True, default=str)
    settings = {s.label: s for s in all_settings(cfg.task, profile, l_tr)}
    settings["L_tr"] = Setting("L_tr", l_tr, "tokens")  # lengthx stats' reference cell
    for cell, chash, label in cells:
        setting = settings.get(label)
        if setting is None:
            verdict.stale[cell] = f"its command no longer has a setting {label!r}"
            continue
        key = (task_key, profile, str(l_tr), str(path), fingerprint, setting.label, str(setting.value), setting.unit)
        if key not in seen:
            if tokenizer is None:
                tokenizer = load_tokenizer(cfg.model)
            try:
                seen[key] = task_behaviour(task, setting, tokenizer, int(cfg.task.get("seed") or 0))
            except (ValueError, OSError) as err:
                seen[key] = f"cannot build: {type(err).__name__}: {err}"
        behaviour = seen[key]
        now = cell_hash(cfg, setting, fingerprint, behaviour)
        if now == chash:
            verdict.current.append(cell)
        else:
            verdict.stale[cell] = f"stored hash {chash}, a run now computes {now}"
