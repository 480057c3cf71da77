"""``python scripts/migrate_hashes.py --results-dir DIR``: carry a results directory's cells from the hashes
of earlier versions of lengthx to the current ones, without recomputing them (docs/design.md §7, docs/results.md).

Two earlier schemes are known:

- **v1** (``--old-root DIR``): the checkout's absolute ``model.path`` in the hash, the weights by name, size, first
  and last MiB;
- **v2** (always tried): the model's config without its path, the checkpoint by its config, tokenizer and weight
  files' size, first and last MiB, and ``task.num_examples`` in the hash.

The current hash (:func:`lengthx.core.cells.cell_hash`) holds every byte of the weights, the task's behaviour at the
cell's setting (a few seeded prompts, the scorer on fixed answers), and not the number of examples.

A hash cannot be inverted, so the migration recomputes: for every candidate job (the commands that produce the
results, :data:`MINI_RECIPES` and ``--command``, plus jobs read off the rows: model, method, task, setting, L_tr,
seed and example count, under each dtype of :data:`DTYPES`, with ``--set`` overrides) it computes each cell's old
hash under each scheme. A (cell, hash) of ``results.csv`` or the records that an old hash reproduces exactly is
the current config's cell; its records are then checked against what the current code does (each example's
prompt hash, and each generated output scored again), and only a cell that passes is rewritten: its rows and
records get the new hash, its Algorithm 1 cache file its new name and key, paper B's attention side file its new
fingerprint. A cell whose prompts or scores differ is stale and stays under its old hash (its next run recomputes
it); so does a cell no candidate reproduces. A ``results.csv`` with an older header gets the current one. Every
file is rewritten beside itself and renamed, under the store's lock, byte for byte except the hashes; a second
run finds nothing left to migrate.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, open_dict

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT, ROOT / "scripts"):  # lengthx, and the old schemes beside this script
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from old_hashes import (  # noqa: E402
    container,
    legacy_cell_hash,
    legacy_fingerprint,
    legacy_model,
    v2_cell_hash,
    v2_fingerprint,
)

from lengthx.cli.recipes import ALIGNED_METHODS, MINI_RECIPES, recipe_jobs, row_jobs  # noqa: E402
from lengthx.config import compose  # noqa: E402
from lengthx.core.cells import Cell, cell_hash, experiment_skip_reason, planned_cells, task_behaviour  # noqa: E402
from lengthx.core.perplexity import PerplexityJob, checkpoint_fingerprint  # noqa: E402
from lengthx.core.runner import Runner, calibration_file  # noqa: E402
from lengthx.core.store import COLUMNS, LEGACY_COLUMNS, ResultsStore, StoreError, csv_text, write_atomic  # noqa: E402
from lengthx.models.loading import load_tokenizer, model_fingerprint  # noqa: E402
from lengthx.models.minis import apply_profile  # noqa: E402
from lengthx.tasks import TASKS, Setting  # noqa: E402
from lengthx.tasks.segmented_ppl import _token_hash  # noqa: E402

log = logging.getLogger("lengthx")


# ---- candidates ---------------------------------------------------------------------------------------------
@dataclass
class Candidate:
    """One cell of one candidate job, as the current code computes it."""

    command: str
    cfg: DictConfig
    cell: Cell
    old_keys: dict[str, dict[str, Any]] = field(default_factory=dict)  # old hash → its Algorithm 1 cache key


@dataclass
class Plan:
    """Old (cell, hash) → the candidate cell that reproduces it."""

    cells: dict[tuple[str, str], Candidate] = field(default_factory=dict)
    jobs: int = 0
    skipped_jobs: list[str] = field(default_factory=list)  # candidate jobs that cannot be built here, and why


def _add_runner_cells(plan: Plan, command: str, cfg: DictConfig, old_roots: list[Path]) -> None:
    stats = command == "stats"
    v2_fp, v1_fp = v2_fingerprint(cfg, perplexity=False), legacy_fingerprint(cfg, perplexity=False)
    runner = Runner(cfg) if not stats and cfg.method.name in ALIGNED_METHODS else None
    for cell in planned_cells(cfg, stats=stats):
        cand = Candidate(command, cfg, cell)
        key = runner.calibration_key(cell, behaviour=False) if runner is not None else {}
        old = {v2_cell_hash(cfg, cell.setting, v2_fp): {**key, "weights": v2_fp}}
        for root in old_roots:
            old[legacy_cell_hash(cfg, cell.setting, v1_fp, root)] = {**key, "model": legacy_model(cfg.model, root),
                                                                    "weights": v1_fp}
        for chash, old_key in old.items():
            cand.old_keys[chash] = old_key if runner is not None else {}
            plan.cells.setdefault((cell.key, chash), cand)


def perplexity_job(cfg: DictConfig) -> PerplexityJob:
    """:class:`PerplexityJob` of ``cfg`` as a migration builds it: it never trains (a run that is not on this
    machine is not a candidate: an error), and its config keeps ``task.train_missing`` as given (it is part of
    the hash) while ``model.path`` points at the run's export."""
    given = cfg.task.get("train_missing", True)
    with open_dict(cfg):
        cfg.task.train_missing = False
    try:
        job = PerplexityJob(cfg)
    finally:
        with open_dict(cfg):
            cfg.task.train_missing = given
    return job


def _add_perplexity_cells(plan: Plan, cfg: DictConfig, old_roots: list[Path]) -> None:
    job = perplexity_job(cfg)  # a missing training run is an error: its cells cannot be migrated here
    v2_fp, v1_fp = v2_fingerprint(job.cfg, perplexity=True), legacy_fingerprint(job.cfg, perplexity=True)
    from lengthx.tasks.segmented_ppl import resolve_settings

    for setting in resolve_settings(job.cfg.task, job.l_t):
        cell = Cell(str(job.cfg.model.name), job.method, "segmented_ppl", setting)
        cand = Candidate("run", job.cfg, cell)
        for chash in (v2_cell_hash(job.cfg, setting, v2_fp),
                      *(legacy_cell_hash(job.cfg, setting, v1_fp, root) for root in old_roots)):
            cand.old_keys[chash] = {"cell_hash": chash}
            plan.cells.setdefault((cell.key, chash), cand)


def add_job(plan: Plan, command: str, overrides: list[str], old_roots: list[Path]) -> None:
    """Add the old hashes of every cell one job (``lengthx <command> <overrides>``) computes."""
    cfg = apply_profile(compose(overrides))
    if experiment_skip_reason(cfg):
        return
    plan.jobs += 1
    if command == "run" and getattr(TASKS.get(cfg.task.name), "scoring", "") == "perplexity":
        _add_perplexity_cells(plan, cfg, old_roots)
    else:
        _add_runner_cells(plan, command, cfg, old_roots)


def plan_migration(results_dir: Path, old_roots: list[Path] = (), commands: list[str] | tuple[str, ...] = MINI_RECIPES,
                   extra: list[str] = ()) -> Plan:
    """Old hashes (v2, and v1 as computed at each of ``old_roots``: checkouts whose ``lengthx/`` package computed
    the results) of every cell the candidate jobs compute."""
    store = ResultsStore(results_dir)
    old = [Path(root) / "lengthx" for root in old_roots]
    plan = Plan()
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for command, job in [*recipe_jobs(commands), *row_jobs(store, list(extra))]:
        overrides = [*job, f"results_dir={results_dir}"]
        if (command, tuple(overrides)) in seen:
            continue
        seen.add((command, tuple(overrides)))
        try:
            add_job(plan, command, overrides, old)
        except (ValueError, OSError) as err:  # e.g. a training run of paper B that is not on this machine
            # (FileNotFoundError is an OSError)
            plan.skipped_jobs.append(f"lengthx {command} {' '.join(job)}: {str(err).splitlines()[0][:200]}")
    return plan


# ---- the current hash and what the current code does ---------------------------------------------------------
class Current:
    """New hashes and the check of a cell's records against the current code, computed once per task, model and
    setting."""

    def __init__(self) -> None:
        self.tokenizers: dict[str, Any] = {}
        self.behaviours: dict[str, str] = {}
        self.examples: dict[str, list[Any]] = {}

    def tokenizer(self, cfg: DictConfig) -> Any:
        key = str(cfg.model.get("path") or cfg.model.get("hub_id"))
        if key not in self.tokenizers:
            self.tokenizers[key] = load_tokenizer(cfg.model)
        return self.tokenizers[key]

    @staticmethod
    def _task_key(cfg: DictConfig, setting: Setting, *more: Any) -> str:
        task = {k: v for k, v in container(cfg.task).items() if k not in ("num_examples", "only", "settings")}
        return json.dumps([task, str(cfg.profile.name), int(cfg.model.l_tr), str(cfg.model.get("path")),
                           [setting.label, setting.value, setting.unit], *more], sort_keys=True, default=str)

    def new_hash(self, cand: Candidate) -> str:
        cfg, setting = cand.cfg, cand.cell.setting
        if cand.cell.task == "segmented_ppl":
            job = perplexity_job(cfg)
            return cell_hash(cfg, setting, job.fingerprint, job.behaviour(setting))
        key = self._task_key(cfg, setting)
        if key not in self.behaviours:
            runner = Runner(cfg)
            self.behaviours[key] = task_behaviour(runner.task, setting, self.tokenizer(cfg), int(cfg.task.seed))
        return cell_hash(cfg, setting, model_fingerprint(cfg.model.get("path")), self.behaviours[key])

    def problem(self, cand: Candidate, records: dict[str, dict[str, Any]], n: int) -> str | None:
        """Why the records of a cell are not what the current code computes (a prompt or a score differs), or
        None. Statistics cells keep no records; a likelihood task's scores come from the model (its prompts and
        continuations are checked)."""
        if cand.command == "stats" or not records:
            return None
        if cand.cell.task == "segmented_ppl":
            return self._perplexity_problem(cand, records, n)
        cfg = cand.cfg.copy()
        with open_dict(cfg):
            cfg.task.num_examples = n
        runner = Runner(cfg)
        key = self._task_key(cfg, cand.cell.setting, n, cfg.method.name == "truncation",
                             cfg.model.get("chat_template"))
        if key not in self.examples:
            runner.tokenizer = self.tokenizer(cfg)
            self.examples[key] = runner.cell_examples(cand.cell.setting)
        generation = getattr(runner.task, "scoring", "generation") == "generation"
        for ex in self.examples[key]:
            rec = records.get(ex.id)
            if rec is None:
                continue
            if rec.get("prompt_hash") != ex.prompt_hash:
                return f"example {ex.id}'s prompt is not the one this code builds"
            if generation and "output" in rec:
                now = runner.task.score(str(rec["output"]), ex)
                for m in runner.task.metrics:
                    if m in rec["scores"] and abs(float(now[m]) - float(rec["scores"][m])) > 1e-6:
                        return f"example {ex.id} scores {m}={now[m]} with this code, {rec['scores'][m]} recorded"
        return None

    def _perplexity_problem(self, cand: Candidate, records: dict[str, dict[str, Any]], n: int) -> str | None:
        job = perplexity_job(cand.cfg)
        for sid, ids in job.task.sequences(self.tokenizer(job.cfg), cand.cell.setting.value, job.n):
            rec = records.get(sid)
            if rec is not None and rec.get("prompt_hash") != _token_hash(ids):
                return f"sequence {sid} is not the one this code scores"
        return None


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
    header: bool = False
    stale: list[str] = field(default_factory=list)  # cells whose records the current code does not reproduce
    unchecked: int = 0  # migrated cells with no records to check (statistics, or records deleted)


def _replace_once(line: bytes, key: str, old: str, new: str, where: Path) -> bytes:
    """``line`` with its JSON ``"key": "old"`` set to ``new``; every other byte stays."""
    before, after = f'"{key}": "{old}"'.encode(), f'"{key}": "{new}"'.encode()
    if line.count(before) != 1:
        raise StoreError(f"{where}: expected one {before.decode()} in a line; migrate it by hand")
    return line.replace(before, after)


def _read_rows(store: ResultsStore) -> list[list[str]]:
    data = store.csv_path.read_bytes() if store.csv_path.exists() else b""
    if not data:
        return []
    store.read()  # stops with the file, line and fix when it does not parse
    text = data.decode("utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if csv_text(rows) != text:
        raise StoreError(f"{store.csv_path} is not in the form lengthx writes it (quoting or line ends differ); "
                         "migrate it by hand")
    return rows


def migrate_rows(store: ResultsStore, cells: dict[tuple[str, str], str], counts: Counts) -> None:
    """Rewrite ``config_hash`` of the rows whose (cell, hash) ``cells`` maps, and give a file with the older
    header (:data:`LEGACY_COLUMNS`) the current one (its older rows an empty ``data`` field)."""
    rows = _read_rows(store)
    if not rows:
        return
    cell_col, hash_col = COLUMNS.index("cell"), COLUMNS.index("config_hash")
    found, changed = set(), False
    if rows[0] == LEGACY_COLUMNS:
        rows = [COLUMNS] + [row + [""] * (len(COLUMNS) - len(row)) for row in rows[1:]]
        counts.header = changed = True
    for row in rows[1:]:
        new = cells.get((row[cell_col], row[hash_col]))
        if new is None:
            counts.rows_left += 1
            continue
        found.add((row[cell_col], row[hash_col]))
        row[hash_col] = new
        counts.rows += 1
    counts.cells = len({cell for cell, _ in found})
    if found or changed:
        write_atomic(store.csv_path, csv_text(rows).encode("utf-8"))


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


def migrate_calibration(results_dir: Path, moves: list[tuple[Candidate, str, str]], current: Current,
                        counts: Counts) -> None:
    """Move each migrated cell's Algorithm 1 cache file from its old name and key to its new ones."""
    for cand, old, new in moves:
        old_key = cand.old_keys.get(old)
        if not old_key:
            continue
        method = cand.cfg.method
        if cand.cell.task == "segmented_ppl":
            new_key = {"cell_hash": new}
        else:
            runner = Runner(cand.cfg)
            runner.tokenizer = current.tokenizer(cand.cfg)
            new_key = runner.calibration_key(cand.cell)
        old_path = calibration_file(results_dir, cand.cell, method, old_key)
        new_path = calibration_file(results_dir, cand.cell, method, new_key)
        if not old_path.is_file() or old_path == new_path:
            continue
        cached = json.loads(old_path.read_text(encoding="utf-8"))
        if not new_path.exists():
            rest = {k: v for k, v in cached.items() if k not in old_key and k not in new_key}
            write_atomic(new_path, json.dumps({**new_key, **rest}, indent=1).encode())
        old_path.unlink()
        counts.calibration += 1


def migrate_attention(results_dir: Path, cands: list[Candidate], old_roots: list[Path], counts: Counts) -> None:
    """Set the checkpoint fingerprint of paper B's attention side files written under an old one."""
    for cand in {id(c): c for c in cands if c.cell.task == "segmented_ppl"}.values():
        path = results_dir / "attention" / f"{cand.cfg.model.name}__{cand.cell.method}.json"
        if not path.is_file():
            continue
        data = path.read_bytes()
        have = json.loads(data).get("fingerprint")
        olds = {v2_fingerprint(cand.cfg, perplexity=True), legacy_fingerprint(cand.cfg, perplexity=True)}
        new = checkpoint_fingerprint(cand.cfg.model)
        if have in olds and have != new:
            write_atomic(path, _replace_once(data, "fingerprint", have, new, path))
            counts.attention += 1


def _present(store: ResultsStore, rows: list[list[str]], plan: Plan) -> dict[tuple[str, str], int]:
    """Every (cell, hash) of the rows (with its largest ``n`` of an ok row) and of the records of the plan's cells
    (with its number of records, where no row names it)."""
    found: dict[tuple[str, str], int] = {}
    cols = {c: k for k, c in enumerate(rows[0])} if rows else {}
    for row in rows[1:]:
        key = (row[cols["cell"]], row[cols["config_hash"]])
        n = int(float(row[cols["n"]])) if row[cols["status"]] == "ok" and row[cols["n"]] else 0
        found[key] = max(found.get(key, 0), n)
    for cell in sorted({c for c, _ in plan.cells}):
        path = store.records_path(cell)
        if not path.is_file():
            continue
        per_hash: dict[str, int] = {}
        for line in path.read_bytes().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("config_hash"), str):
                per_hash[rec["config_hash"]] = per_hash.get(rec["config_hash"], 0) + 1
        for chash, count in per_hash.items():
            found.setdefault((cell, chash), count)
    return found


def migrate(results_dir: Path, old_roots: list[Path] = (), commands: list[str] | tuple[str, ...] = MINI_RECIPES,
            extra: list[str] = (), check: bool = True) -> tuple[Counts, Plan]:
    """Plan and apply the migration of ``results_dir`` (under its store's lock); ``check``: a cell's records must
    be what the current code computes (:meth:`Current.problem`)."""
    results_dir = Path(results_dir)
    store = ResultsStore(results_dir)
    plan = plan_migration(results_dir, list(old_roots), commands, list(extra))
    counts, current = Counts(), Current()
    with store.lock:
        rows = _read_rows(store)
        mapping: dict[tuple[str, str], str] = {}
        moves: list[tuple[Candidate, str, str]] = []
        present = [(key, n) for key, n in sorted(_present(store, rows, plan).items()) if key in plan.cells]
        for k, ((cell, old), n) in enumerate(present, 1):
            cand = plan.cells[(cell, old)]
            log.info("[%d/%d] %s (%s)", k, len(present), cell, old)
            new = current.new_hash(cand)
            if new == old:
                continue
            records = {i: r for i, r in store.load_records(cell).items() if r.get("config_hash") == old}
            problem = current.problem(cand, records, n or len(records)) if check else None
            if problem is not None:
                counts.stale.append(f"{cell} ({old}): {problem}")
                continue
            counts.unchecked += not records
            mapping[(cell, old)] = new
            moves.append((cand, old, new))
        migrate_rows(store, mapping, counts)
        migrate_records(store, mapping, counts)  # also a cell interrupted before its rows: it resumes
        migrate_calibration(results_dir, moves, current, counts)
        migrate_attention(results_dir, [c for c, _, _ in moves], list(old_roots), counts)
    return counts, plan


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python scripts/migrate_hashes.py", description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", default="results/mini", help="the results directory to migrate (any)")
    p.add_argument("--old-root", action="append", default=[],
                   help="a checkout (the directory holding lengthx/) whose absolute path v1 hashes hold; repeatable")
    p.add_argument("--command", action="append", default=[],
                   help="another command that produced results, e.g. 'run -m task=passkey method=log model.path=DIR'")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an override added to every job read off the rows, e.g. model.path=runs/mini-t5/final")
    p.add_argument("--no-check", action="store_true",
                   help="migrate a reproduced cell without checking its records against the current code")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    counts, plan = migrate(Path(args.results_dir), [Path(r) for r in args.old_root],
                           [*MINI_RECIPES, *args.command], args.set, check=not args.no_check)
    print(f"{plan.jobs} candidate jobs, {len(plan.cells)} (cell, old hash) pairs")
    for why in plan.skipped_jobs:
        print(f"  not a candidate here: {why}")
    print(f"results.csv: {counts.rows} rows of {counts.cells} cells migrated, {counts.rows_left} rows left as they "
          f"were (no candidate job reproduces their hash, or they are stale)"
          + ("; the header gained the data column" if counts.header else ""))
    print(f"records: {counts.records} lines in {counts.record_files} files; calibration: {counts.calibration} "
          f"files renamed; attention: {counts.attention} side files; {counts.unchecked} migrated cells had no "
          "records to check")
    for line in counts.stale:
        print(f"  stale, left under its old hash (its next run recomputes it): {line}")


if __name__ == "__main__":
    main()
