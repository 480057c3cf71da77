"""``python -m lengthx.cli.migrate_hashes --old-root DIR``: carry a results directory from the cell hashes that
held the checkout's absolute path to the portable ones (docs/design.md §7).

Cells hashed before this change put the resolved ``model.path`` (``<checkout>/lengthx/checkpoints/mini-t5``)
into ``results.csv``'s ``config_hash``, the records' ``config_hash`` and Algorithm 1's cache key, so a clone at
another path recomputed every committed cell. Now a hash holds the model's config without its path and the
checkpoint by content (:mod:`lengthx.core.cells`).

A hash cannot be inverted, so the migration recomputes: for every candidate job (the commands that produce the
results, :data:`MINI_RECIPES`, plus one job per (model, method, task, example count) found in the rows) it
computes each cell's old hash, as the old code did at ``--old-root``, and its new hash. Only a row whose
(cell, hash) one of them reproduces exactly is rewritten, with the records of that cell under that hash, its
Algorithm 1 cache file (renamed to its new key) and paper B's attention side file; anything else stays as it
is and is counted (a cell computed under a config that no longer exists was not done before either).
Every file is rewritten in place byte for byte except the hash, under the store's lock, and a second run finds
nothing left to migrate.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthx.cli.common import sweep_jobs
from lengthx.config import PACKAGE_DIR, compose
from lengthx.core.cells import (
    TEMPERATURE_METHODS,
    cell_hash,
    experiment_skip_reason,
    planned_cells,
)
from lengthx.core.perplexity import PerplexityJob
from lengthx.core.runner import Runner, calibration_file
from lengthx.core.store import COLUMNS, ResultsStore, StoreError, write_atomic
from lengthx.models.loading import weights_fingerprint
from lengthx.models.minis import apply_profile
from lengthx.segmented.plan import source_meta
from lengthx.tasks import TASKS, Setting

# The commands of the Makefile's reproduce-mini (AA_MINI_RECIPE, SB_RECIPE with SB_MINI_ARGS) and demo when the
# hashes changed; ``task.only`` and ``experiment`` never enter a hash, so the column slices are left out.
MINI_RECIPES = (
    "stats -m experiment=aa_table1 task=topics,lines,passkey,mdqa",
    "stats -m model=mini-t5-lm task=lm,code_completion",
    "run -m experiment=aa_table4 calibration.num_examples=1",
    "run -m experiment=aa_table5 calibration.num_examples=1",
    "run -m experiment=aa_table3 task.num_examples=100 calibration.num_examples=4",
    "run -m experiment=aa_table6 task.num_examples=60 calibration.num_examples=4",
    "run -m experiment=aa_code_key task.num_examples=60 calibration.num_examples=4",
    "run -m experiment=aa_table3 method=prop1,prop2 task.num_examples=100 calibration.num_examples=4",
    "run -m experiment=aa_table3 method=pmax,entropy ++method.per_layer=true ++method.search=bisect "
    "task.num_examples=100 calibration.num_examples=4",
    "run -m task=passkey method=none,pmax task.num_examples=4 calibration.num_examples=1",
    "run -m profile=mini task=segmented_ppl model=gpt2,pythia-160m,gpt2-xl,pythia-1.4b,bloom-1b1 "
    "task.factors=[1,2,3,4,5] task.attention_medians=4 task.num_examples=60 task.text_factor=5",
    "run -m profile=mini task=segmented_ppl model=gpt2,pythia-160m task.run=full-2x,full-4x,chunk-0.125-2x,"
    "chunk-0.125-4x,chunk-0.25-2x,chunk-0.25-4x,chunk-0.5-2x,chunk-0.5-4x,prefix-0.25-2x,prefix-0.25-4x,"
    "prefix-0.5-2x,prefix-0.5-4x task.num_examples=60 task.text_factor=5",
    "run -m profile=mini task=segmented_ppl model=gpt2-xl,pythia-1.4b,bloom-1b1 task.run=chunk-0.25-2x,"
    "chunk-0.25-4x task.attention_medians=4 task.num_examples=60 task.text_factor=5",
    "run -m profile=mini task=segmented_ppl model=gpt2-xl,bloom-1b1 task.run=da-1x task.num_examples=60 "
    "task.text_factor=5",
)

ALIGNED_METHODS = ("pmax", "entropy", "prop1", "prop2")  # methods whose τ goes through Algorithm 1's cache
# calibration.num_examples values tried for a row's job (None: the profile's)
CALIBRATION_COUNTS = (None, 1, 2, 4, 5)


# ---- the old hashes ---------------------------------------------------------------------------------------
def legacy_model(model_cfg: Any, old_package_dir: Path) -> dict[str, Any]:
    """The model as the old hashes held it: the whole resolved config, a checkpoint inside the package at
    ``old_package_dir`` (where the old checkout's ``lengthx/`` was)."""
    model = OmegaConf.to_container(model_cfg, resolve=True) if isinstance(model_cfg, DictConfig) else dict(model_cfg)
    path = model.get("path")
    if path and Path(str(path)).is_relative_to(PACKAGE_DIR):
        model["path"] = str(Path(old_package_dir) / Path(str(path)).relative_to(PACKAGE_DIR))
    return model


def legacy_config_hash(cfg: DictConfig, setting: Setting, old_package_dir: Path) -> str:
    """:func:`lengthx.core.cells.config_hash` as it was computed in a checkout whose package was at
    ``old_package_dir``."""
    relevant = {
        "model": legacy_model(cfg.model, old_package_dir),
        "method": OmegaConf.to_container(cfg.method, resolve=True),
        "task": {k: v for k, v in OmegaConf.to_container(cfg.task, resolve=True).items() if k not in ("settings", "only")},
        "setting": [setting.label, setting.value, setting.unit],
        "dtype": cfg.dtype,
        "calibration": OmegaConf.to_container(cfg.calibration, resolve=True)
        if cfg.method.name in ALIGNED_METHODS else None,
    }
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:12]


def legacy_cell_hash(cfg: DictConfig, setting: Setting, fingerprint: str, old_package_dir: Path) -> str:
    """The old :func:`lengthx.core.cells.cell_hash`; ``fingerprint`` is the old one (:func:`legacy_fingerprint`)."""
    return hashlib.sha256(f"{legacy_config_hash(cfg, setting, old_package_dir)}|{fingerprint}".encode()).hexdigest()[:12]


def legacy_fingerprint(cfg: DictConfig, perplexity: bool) -> str:
    """The old fingerprint of the scored checkpoint: its weight files only (paper B: after the run's hash)."""
    weights = weights_fingerprint(cfg.model.get("path"))
    if not perplexity:
        return weights
    meta = source_meta(cfg.model)
    run = f"{meta.get('config_hash', '')}:{meta.get('steps', '')}" if meta else ""
    return f"{run}:{weights}"


# ---- what to migrate --------------------------------------------------------------------------------------
@dataclass
class Plan:
    """Old → new, for everything a results directory keys by hash."""

    cells: dict[tuple[str, str], str] = field(default_factory=dict)  # (cell key, old hash) → new hash
    calibration: dict[Path, tuple[Path, dict[str, Any]]] = field(default_factory=dict)  # old file → (file, key)
    attention: dict[Path, tuple[str, str]] = field(default_factory=dict)  # side file → (old, new fingerprint)
    jobs: int = 0
    skipped_jobs: list[str] = field(default_factory=list)  # candidate jobs that cannot be built here, and why


def _runner_cells(cfg: DictConfig, stats: bool, old: list[Path], plan: Plan) -> None:
    runner = Runner(cfg)
    legacy_fp = legacy_fingerprint(cfg, perplexity=False)
    for cell in planned_cells(cfg, stats=stats):
        new = cell_hash(cfg, cell.setting, runner.weights)
        for root in old:
            plan.cells[(cell.key, legacy_cell_hash(cfg, cell.setting, legacy_fp, root))] = new
        if stats or cfg.method.name not in ALIGNED_METHODS:
            continue
        path, key = runner.calibration_path(cell)
        for root in old:
            legacy_key = {**key, "model": legacy_model(cfg.model, root), "weights": legacy_fp}
            plan.calibration[calibration_file(path.parent.parent, cell, cfg.method, legacy_key)] = (path, key)


def _perplexity_cells(cfg: DictConfig, old: list[Path], plan: Plan) -> None:
    job = PerplexityJob(cfg)  # a missing training run is a ValueError: its cells cannot be migrated here
    legacy_fp = legacy_fingerprint(cfg, perplexity=True)
    for cell, new in job.cells():
        for root in old:
            plan.cells[(cell.key, legacy_cell_hash(cfg, cell.setting, legacy_fp, root))] = new
    if int(cfg.task.get("attention_medians") or 0) > 0:
        side = Path(cfg.results_dir) / "attention" / f"{cfg.model.name}__{job.method}.json"
        plan.attention[side] = (legacy_fp, job.fingerprint)


def add_job(plan: Plan, command: str, overrides: list[str], old: list[Path]) -> None:
    """Add the old → new hashes of every cell one job (``lengthx <command> <overrides>``) computes."""
    cfg = apply_profile(compose(overrides))
    if experiment_skip_reason(cfg):
        return
    plan.jobs += 1
    if command == "run" and getattr(TASKS.get(cfg.task.name), "scoring", "") == "perplexity":
        _perplexity_cells(cfg, old, plan)
    else:
        _runner_cells(cfg, command == "stats", old, plan)


METHOD_ID = re.compile(r"(?P<name>fixed-(?P<tau>[^-]+)|[a-z0-9]+)(?:-scope=(?P<scope>[a-z_]+))?"
                       r"(?P<per_layer>-per-layer)?(?:-(?P<search>[a-z]+))?")


def method_overrides(method: str) -> list[str] | None:
    """The overrides that give ``method`` (an id of :func:`lengthx.core.cells.method_id`), or None for a label
    that is not a temperature method (paper B's, ``stats``)."""
    m = METHOD_ID.fullmatch(method)
    name = m and ("fixed" if m["tau"] else m["name"])
    if not m or name not in (*TEMPERATURE_METHODS, "truncation"):
        return None
    out = [f"method={name}"] + ([f"method.tau={m['tau']}"] if m["tau"] else [])
    out += [f"method.scope={m['scope']}"] if m["scope"] else []
    out += ["++method.per_layer=true"] if m["per_layer"] else []
    return out + ([f"++method.search={m['search']}"] if m["search"] else [])


def row_jobs(store: ResultsStore) -> list[tuple[str, list[str]]]:
    """One candidate job per (model, method, task, examples) of paper A's rows: the model, method and task as
    the row names them, ``task.num_examples`` unset or the row's ``n``, and for an aligned method each of
    :data:`CALIBRATION_COUNTS` (``stats`` rows: ``lengthx stats`` at τ = 1)."""
    df = store.read()
    if df.empty:
        return []
    jobs: list[tuple[str, list[str]]] = []
    seen = df[df["status"] == "ok"].drop_duplicates(["model", "method", "task", "n"])
    for r in seen.itertuples():
        if getattr(TASKS.get(r.task), "scoring", "") == "perplexity":
            continue  # paper B's jobs carry knobs the rows do not name: MINI_RECIPES has them
        if r.method == "stats":
            jobs.append(("stats", [f"model={r.model}", f"task={r.task}"]))
            continue
        method = method_overrides(str(r.method))
        if method is None:
            continue
        counts = CALIBRATION_COUNTS if method[0].split("=")[1] in ALIGNED_METHODS else (None,)
        for examples in (None, int(r.n)):
            for cal in counts:
                jobs.append(("run", [f"model={r.model}", f"task={r.task}", *method,
                                     *([f"task.num_examples={examples}"] if examples is not None else []),
                                     *([f"calibration.num_examples={cal}"] if cal is not None else [])]))
    return jobs


def recipe_jobs(commands: tuple[str, ...] | list[str]) -> list[tuple[str, list[str]]]:
    """The jobs of ``lengthx <command>`` lines (``-m`` sweeps expanded as Hydra expands them)."""
    jobs = []
    for line in commands:
        command, *args = shlex.split(line)
        _, expanded = sweep_jobs([a for a in args if a not in ("-m", "--multirun")])
        jobs += [(command, job) for job in expanded]
    return jobs


def plan_migration(results_dir: Path, old_roots: list[Path], commands: list[str] | tuple[str, ...] = MINI_RECIPES
                   ) -> Plan:
    """Old → new hashes of every cell the candidate jobs compute, the old code run at each of ``old_roots``
    (checkouts whose ``lengthx/`` package computed the results)."""
    store = ResultsStore(results_dir)
    old = [Path(root) / "lengthx" for root in old_roots]
    plan = Plan()
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for command, job in [*recipe_jobs(commands), *row_jobs(store)]:
        overrides = [*job, f"results_dir={results_dir}"]
        if (command, tuple(overrides)) in seen:
            continue
        seen.add((command, tuple(overrides)))
        try:
            add_job(plan, command, overrides, old)
        except ValueError as err:  # e.g. a training run of paper B that is not on this machine
            plan.skipped_jobs.append(f"lengthx {command} {' '.join(job)}: {err}")
    return plan


# ---- rewriting ------------------------------------------------------------------------------------------
@dataclass
class Counts:
    rows: int = 0
    rows_left: int = 0
    cells: int = 0
    records: int = 0
    record_files: int = 0
    calibration: int = 0
    attention: int = 0


def _replace_once(line: bytes, key: str, old: str, new: str, where: Path) -> bytes:
    """``line`` with its JSON ``"key": "old"`` set to ``new``; every other byte stays."""
    before, after = f'"{key}": "{old}"'.encode(), f'"{key}": "{new}"'.encode()
    if line.count(before) != 1:
        raise StoreError(f"{where}: expected one {before.decode()} in a line; migrate it by hand")
    return line.replace(before, after)


def migrate_rows(store: ResultsStore, cells: dict[tuple[str, str], str], counts: Counts) -> None:
    """Rewrite ``config_hash`` of the rows whose (cell, hash) ``cells`` maps."""
    data = store.csv_path.read_bytes() if store.csv_path.exists() else b""
    if not data:
        return
    text = data.decode("utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if _csv_text(rows) != text:
        raise StoreError(f"{store.csv_path} is not in the form lengthx writes it (quoting or line ends differ); "
                         "migrate it by hand")
    cell_col, hash_col = COLUMNS.index("cell"), COLUMNS.index("config_hash")
    found = set()
    for row in rows[1:]:
        new = cells.get((row[cell_col], row[hash_col]))
        if new is None:
            counts.rows_left += 1
            continue
        found.add((row[cell_col], row[hash_col]))
        row[hash_col] = new
        counts.rows += 1
    counts.cells = len(found)
    if found:
        write_atomic(store.csv_path, _csv_text(rows).encode("utf-8"))


def _csv_text(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def migrate_records(store: ResultsStore, cells: dict[tuple[str, str], str], counts: Counts) -> None:
    """Rewrite ``config_hash`` of every record of a migrated cell written under its old hash."""
    by_cell: dict[str, dict[str, str]] = {}
    for (cell, old), new in cells.items():
        by_cell.setdefault(cell, {})[old] = new
    for cell, hashes in sorted(by_cell.items()):
        path = store.records_path(cell)
        if not path.is_file():
            continue
        lines = path.read_bytes().splitlines(keepends=True)
        out, changed = [], 0
        for line in lines:
            try:
                old = json.loads(line).get("config_hash")
            except (ValueError, AttributeError):
                old = None  # a damaged line stays for the store to set aside
            if old in hashes:
                line = _replace_once(line, "config_hash", old, hashes[old], path)
                changed += 1
            out.append(line)
        if changed:
            write_atomic(path, b"".join(out))
            counts.records += changed
            counts.record_files += 1


def migrate_calibration(calibration: dict[Path, tuple[Path, dict[str, Any]]], counts: Counts) -> None:
    """Move each old Algorithm 1 cache file to its new name, its key fields replaced by the new key."""
    for old_path, (new_path, key) in sorted(calibration.items()):
        if not old_path.is_file() or old_path == new_path:
            continue
        cached = json.loads(old_path.read_text(encoding="utf-8"))
        if not new_path.exists():
            rest = {k: v for k, v in cached.items() if k not in key}
            write_atomic(new_path, json.dumps({**key, **rest}, indent=1).encode())
        old_path.unlink()
        counts.calibration += 1


def migrate_attention(attention: dict[Path, tuple[str, str]], counts: Counts) -> None:
    """Set the checkpoint fingerprint of paper B's attention side files written under the old one."""
    for path, (old, new) in sorted(attention.items()):
        if not path.is_file() or old == new:
            continue
        data = path.read_bytes()
        if json.loads(data).get("fingerprint") != old:
            continue
        write_atomic(path, _replace_once(data, "fingerprint", old, new, path))
        counts.attention += 1


def migrate(results_dir: Path, old_roots: list[Path], commands: list[str] | tuple[str, ...] = MINI_RECIPES
            ) -> tuple[Counts, Plan]:
    """Plan and apply the migration of ``results_dir`` (under its store's lock)."""
    store = ResultsStore(Path(results_dir))
    plan = plan_migration(Path(results_dir), old_roots, commands)
    counts = Counts()
    with store.lock:
        migrate_rows(store, plan.cells, counts)
        migrate_records(store, plan.cells, counts)  # also a cell interrupted before its rows: it resumes
        migrate_calibration(plan.calibration, counts)
        migrate_attention(plan.attention, counts)
    return counts, plan


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m lengthx.cli.migrate_hashes", description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", default="results/mini")
    p.add_argument("--old-root", action="append", required=True,
                   help="the checkout (the directory holding lengthx/) that computed the results; repeatable")
    p.add_argument("--command", action="append", default=[],
                   help="another command that produced results, e.g. 'run -m task=passkey method=log'")
    args = p.parse_args(argv)
    counts, plan = migrate(Path(args.results_dir), [Path(r) for r in args.old_root],
                           [*MINI_RECIPES, *args.command])
    print(f"{plan.jobs} candidate jobs, {len(plan.cells)} (cell, old hash) pairs")
    for why in plan.skipped_jobs:
        print(f"  not a candidate here: {why}")
    print(f"results.csv: {counts.rows} rows of {counts.cells} cells migrated, {counts.rows_left} rows left as they "
          f"were (no candidate job reproduces their hash)")
    print(f"records: {counts.records} lines in {counts.record_files} files; calibration: {counts.calibration} "
          f"files renamed; attention: {counts.attention} side files")


if __name__ == "__main__":
    main()
