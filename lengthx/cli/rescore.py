"""``python -m lengthx.cli.rescore --task T --old OVERRIDE``: carry a task's cells to a new scoring rule by scoring
their stored outputs again, without generating anything (docs/results.md).

A change to how a task scores an output (not to its prompts) comes with a new key in its config
(``scoring_version`` in ``conf/task/<task>.yaml``), so every cell of the task has a new hash and a run recomputes
it. Where the records hold every example's output, the new numbers need no model: for every candidate job (the
commands that produce the results, :data:`lengthx.cli.recipes.MINI_RECIPES`, plus one job per row) this
computes each cell's hash as it was (the config with ``--old`` applied, e.g. ``~task.scoring_version``) and as it is
now, rebuilds the cell's examples and checks that every record's prompt is still the one its example has; then
each record gets the task's current scores and the new hash, and each row the mean of those scores (4 decimals,
as a run writes it), the new hash, this checkout's commit and ``message`` "rescored from its records". A cell
without records of its task's scores (``lengthx stats`` rows) only takes the new hash. A cell whose prompts
changed, or whose records are fewer than its row's ``n``, is left as it was and counted: a run recomputes it.
Everything is rewritten under the store's lock; a second run finds nothing left to do.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from lengthx.cli.recipes import MINI_RECIPES, recipe_jobs, row_jobs
from lengthx.config import compose
from lengthx.core.cells import cell_hash, experiment_skip_reason, planned_cells
from lengthx.core.runner import Runner
from lengthx.core.store import COLUMNS, ResultsStore, StoreError, git_commit, write_atomic
from lengthx.models.minis import apply_profile
from lengthx.tasks import Example

RESCORED = "rescored from its records"


@dataclass
class CellPlan:
    """One cell to carry: its new hash, and the runner that rebuilds its examples and scores them."""

    new: str
    runner: Runner
    setting: Any
    stats: bool


@dataclass
class Counts:
    """What a rescoring did: rows carried, cells rescored or only rehashed, records rewritten, values that changed
    and the cells it left as they were (with the reason)."""

    rows: int = 0
    rescored_cells: int = 0
    rehashed_cells: int = 0
    records: int = 0
    changed_values: list[tuple[str, str, float, float]] = field(default_factory=list)  # cell, metric, old, new
    left: list[str] = field(default_factory=list)  # cells left as they were, and why


def plan(results_dir: Path, task: str, old: list[str], commands: tuple[str, ...] | list[str] = MINI_RECIPES
         ) -> dict[tuple[str, str], CellPlan]:
    """(cell key, old hash) → the cell's plan, for every cell of ``task`` the candidate jobs compute."""
    store = ResultsStore(results_dir)
    out: dict[tuple[str, str], CellPlan] = {}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for command, job in [*recipe_jobs(commands), *row_jobs(store)]:
        if command not in ("run", "stats") or (command, tuple(job)) in seen:
            continue
        seen.add((command, tuple(job)))
        overrides = [*job, f"results_dir={results_dir}"]
        new_cfg = apply_profile(compose(overrides))
        if str(new_cfg.task.name) != task or experiment_skip_reason(new_cfg):
            continue
        old_cfg = apply_profile(compose([*overrides, *old]))
        runner = Runner(new_cfg)
        stats = command == "stats"
        for cell in planned_cells(new_cfg, stats=stats):
            before = cell_hash(old_cfg, cell.setting, runner.weights)
            after = cell_hash(new_cfg, cell.setting, runner.weights)
            out.setdefault((cell.key, before), CellPlan(after, runner, cell.setting, stats))
    return out


_EVALUATION: dict[str, list[Example]] = {}  # a setting's evaluation examples, shared by the methods of one job


def _cell_examples(cell: CellPlan) -> list[Example]:
    """The cell's examples as its run builds them (:meth:`Runner.cell_examples`), the evaluation examples built
    once per (model, task config, setting) and shared by every method."""
    runner = cell.runner
    key = json.dumps([runner.cfg.model.name, str(runner.weights), OmegaConf.to_container(runner.cfg.task, resolve=True),
                      [cell.setting.label, cell.setting.value, cell.setting.unit]], sort_keys=True, default=str)
    if key not in _EVALUATION:
        _EVALUATION[key] = runner.evaluation_examples(cell.setting)
    runner._evaluation = ((cell.setting.label, cell.setting.value, cell.setting.unit), _EVALUATION[key])
    return runner.cell_examples(cell.setting)


def _rescore_records(store: ResultsStore, key: str, old: str, cell: CellPlan, n: int, counts: Counts
                     ) -> tuple[list[bytes], dict[str, float]] | None:
    """The cell's records file with its ``old``-hash records rescored (None, with the reason counted, when they
    cannot be: fewer than ``n``, or a prompt that is not the example's any more) and the new mean per metric."""
    path = store.records_path(key)
    lines = path.read_bytes().splitlines(keepends=True) if path.is_file() else []
    mine = {json.loads(line)["id"]: k for k, line in enumerate(lines) if json.loads(line).get("config_hash") == old}
    if len(mine) < n:
        counts.left.append(f"{key}: {len(mine)} records under {old}, its row has n = {n}")
        return None
    examples = {e.id: e for e in _cell_examples(cell)}
    task = cell.runner.task
    totals = {m: 0.0 for m in task.metrics}
    for ex_id, k in mine.items():
        rec = json.loads(lines[k])
        ex = examples.get(ex_id)
        if ex is None or ex.prompt_hash != rec.get("prompt_hash"):
            counts.left.append(f"{key}: example {ex_id}'s prompt is not the one its record answered")
            return None
        rec["scores"] = task.score(rec["output"], Example(ex.id, ex.prompt, rec["target"], ex.requested_tokens,
                                                          ex.actual_tokens, rec.get("meta", {})))
        rec["config_hash"] = cell.new
        lines[k] = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
        for m in totals:
            totals[m] += float(rec["scores"][m])
    return lines, {m: round(v / len(mine), 4) for m, v in totals.items()}


def _rows(store: ResultsStore) -> tuple[str, list[list[str]]]:
    text = store.csv_path.read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if _csv_text(rows) != text:
        raise StoreError(f"{store.csv_path} is not in the form lengthx writes it; rescore it by hand")
    return text, rows


COL = {name: COLUMNS.index(name) for name in ("cell", "config_hash", "metric", "value", "n", "status", "git_commit",
                                             "message")}


def rescore(results_dir: Path, task: str, old: list[str], commands: tuple[str, ...] | list[str] = MINI_RECIPES
            ) -> Counts:
    """Plan and apply the rescoring of ``task``'s cells in ``results_dir``: the records are scored again first,
    then rows and records are rewritten under the store's lock (other runs may append meanwhile)."""
    store = ResultsStore(Path(results_dir))
    cells = plan(Path(results_dir), task, old, commands)
    counts = Counts()
    _, rows = _rows(store)
    found: dict[tuple[str, str], list[list[str]]] = {}
    for row in rows[1:]:
        if (row[COL["cell"]], row[COL["config_hash"]]) in cells and row[COL["status"]] == "ok":
            found.setdefault((row[COL["cell"]], row[COL["config_hash"]]), []).append(row)
    done: dict[tuple[str, str], tuple[list[bytes], dict[str, float]] | None] = {}  # None: rehashed only
    for (key, old_hash), cell_rows in sorted(found.items()):
        cell = cells[(key, old_hash)]
        if cell.stats or not set(cell.runner.task.metrics) & {r[COL["metric"]] for r in cell_rows}:
            done[(key, old_hash)] = None
            continue
        result = _rescore_records(store, key, old_hash, cell, int(cell_rows[0][COL["n"]]), counts)
        if result is not None:
            done[(key, old_hash)] = result
            print(f"rescored {key}", flush=True)
    with store.lock:
        _, rows = _rows(store)
        for row in rows[1:]:
            which = (row[COL["cell"]], row[COL["config_hash"]])
            if which not in done or row[COL["status"]] != "ok":
                continue
            if done[which] is not None:
                means = done[which][1]
                metric = row[COL["metric"]]
                if metric in means:
                    if float(row[COL["value"]]) != means[metric]:
                        counts.changed_values.append((which[0], metric, float(row[COL["value"]]), means[metric]))
                    row[COL["value"]] = str(means[metric])  # as a run's csv writer writes the rounded float
                row[COL["git_commit"]], row[COL["message"]] = git_commit(), RESCORED
            row[COL["config_hash"]] = cells[which].new
            counts.rows += 1
        for (key, old_hash), result in sorted(done.items()):
            if result is None:
                counts.rehashed_cells += 1
                continue
            write_atomic(store.records_path(key), b"".join(result[0]))
            counts.records += sum(1 for line in result[0] if json.loads(line).get("config_hash") == cells[(key, old_hash)].new)
            counts.rescored_cells += 1
        write_atomic(store.csv_path, _csv_text(rows).encode("utf-8"))
    return counts


def _csv_text(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m lengthx.cli.rescore", description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", default="results/mini")
    p.add_argument("--task", required=True, help="the task whose cells are rescored, e.g. code_completion")
    p.add_argument("--old", action="append", required=True,
                   help="the override that gives the old config, e.g. '~task.scoring_version'; repeatable")
    p.add_argument("--command", action="append", default=[],
                   help="another command that produced results, e.g. 'run -m task=code_completion method=log'")
    args = p.parse_args(argv)
    counts = rescore(Path(args.results_dir), args.task, args.old, [*MINI_RECIPES, *args.command])
    print(f"results.csv: {counts.rows} rows carried ({counts.rescored_cells} cells rescored from their records, "
          f"{counts.rehashed_cells} cells without task scores rehashed); records: {counts.records} rescored")
    print(f"values changed: {len(counts.changed_values)}")
    for key, metric, before, after in counts.changed_values:
        print(f"  {key} {metric}: {before:g} -> {after:g}")
    for why in counts.left:
        print(f"  left as it was: {why}")


if __name__ == "__main__":
    main()
