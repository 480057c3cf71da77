"""The cells of a retrieval stand-in's study, measured with the harness (``lengthx run``, mini profile) and
summarised with paired intervals: shared by the first-of-K topics study (``study_mini_t5_counts.py``,
docs/mini-t5-study.md) and the lines study of the lookup stand-in (``study_mini_t5_lines.py``,
docs/mini-t5-lookup.md). A study is a :class:`Design`: its model, L_tr, variants (a task and its overrides,
a fixed count or the benchmark's records) and how its snapshots are named; everything else is the same:

- the cells of a snapshot, lengths in order and at each length the paper's methods before the extension's; past
  L_tr only the variants the snapshot handles at L_tr (its card at the bar), since a fall there could otherwise be
  the structure, not the length;
- accuracy with its Wilson interval, each rule's paired difference to τ = 1 (Newcombe), τ = 1's paired change
  against L_tr, the count each setting's records really hold, and ``*`` where Algorithm 1's τ is its grid's end;
- a replication of a cell at a task seed the study never used, and the replications a finding still owes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lengthx.core.store import SHORT_OF_TARGET, UNALIGNED_MARK, ResultsStore
from lengthx.report.tables.intervals import cell_scores, difference_ci, mean_ci
from lengthx.report.tables.render import latest_ok

DEFAULT_LENGTHS = (256, 1024, 2560, 7424)  # L_tr, 4x, 10x, 29x
REPLICATION_SEED = 7  # a task seed no card, check or study uses: a finding's replication
# method name in rows -> its overrides; the last two are the extension beyond the paper's grid
METHODS = {"none": ("method=none",), "log": ("method=log",), "pmax": ("method=pmax",),
           "entropy": ("method=entropy",),
           "pmax-bisect-min0.2": ("method=pmax", "method.search=bisect", "method.tau_min=0.2"),
           "entropy-bisect-min0.2": ("method=entropy", "method.search=bisect", "method.tau_min=0.2")}
PAPER_METHODS = ("log", "pmax", "entropy")
EXTENSION = ("pmax-bisect-min0.2", "entropy-bisect-min0.2")
NAMES = {"none": "τ = 1", "log": "log", "pmax": "P_max", "entropy": "H", "pmax-bisect-min0.2": "P_max ≥0.2 (ext.)",
         "entropy-bisect-min0.2": "H ≥0.2 (ext.)"}


class Snap(Protocol):
    """A study's snapshot: its name under the study's results, its directory, and its card at L_tr."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> Path: ...

    def held_out(self, task: str) -> float: ...


@dataclass(frozen=True)
class Variant:
    """A row group of a study: a task and its overrides, a fixed count or none (the benchmark's records), the
    card's held-out set at L_tr that speaks for it and that set's bar (no set: measured at L_tr only)."""

    name: str
    overrides: tuple[str, ...]
    card_set: str | None
    bar: float
    count: int | None = None

    @property
    def task(self) -> str:
        return self.overrides[0].split("=")[1]

    def label(self, length: int) -> str:
        """The setting's label in results rows (lengthx.tasks.base.all_settings)."""
        return f"{length}tokens" + (f"-{self.count}{self.task}" if self.count is not None else "")


@dataclass(frozen=True)
class Design:
    """One study: the model config its snapshots run as, L_tr, its variants and the record meta that counts what
    a record holds (``n_topics``, ``n_lines``)."""

    model: str
    l_tr: int
    variants: tuple[Variant, ...]
    count_meta: str
    held: str  # the column title of that count ("topics held")
    methods: tuple[str, ...] = tuple(METHODS)  # the methods its tables show, τ = 1 first

    def variant(self, name: str) -> Variant:
        """A variant by name; spaces may be left out (``topicsK=1``)."""
        return next(v for v in self.variants if v.name.replace(" ", "") == name.replace(" ", ""))


def handled(snap: Snap, variant: Variant) -> bool:
    """Whether the snapshot handles the variant's structure at L_tr: its card's set at the variant's bar."""
    return variant.card_set is not None and snap.held_out(variant.card_set) >= variant.bar


# ---- measuring ---------------------------------------------------------------------------------------------
def run_config(design: Design, snap: Snap, store: Path, variant: Variant, method: str, lengths: list[int],
               examples: int, calibration: int, device: str, seed: int = 0) -> Any:
    from lengthx.models.minis import compose_run

    return compose_run([f"model={design.model}", f"model.path={snap.path}", f"model.l_tr={design.l_tr}",
                        *variant.overrides, *METHODS[method], f"task.settings=[{','.join(map(str, lengths))}]",
                        "task.unit=tokens", f"task.num_examples={examples}", f"task.seed={seed}",
                        f"results_dir={store}", f"calibration.num_examples={calibration}", f"device={device}"])


def planned(design: Design, snap: Snap, args: argparse.Namespace) -> list[Any]:
    """The run configurations of one snapshot's cells, one cell each, in the order the study measures them: lengths
    in order, so a short session finishes the short ones, and at each length the paper's methods on every variant
    before the extension's; past L_tr only the variants the snapshot handles at L_tr."""
    results = Path(args.results)
    paper = [m for m in METHODS if m not in EXTENSION and m in args.methods]
    extension = [m for m in EXTENSION if m in args.methods]
    out = []
    for length, methods in ((n, ms) for n in args.lengths for ms in (paper, extension)):  # the extension last
        for variant in sorted((v for v in design.variants if v.name in args.variants),
                              key=lambda v: args.variants.index(v.name)):
            if length > design.l_tr and not handled(snap, variant):
                if variant.card_set is not None and (methods is extension or not extension):
                    print(f"{snap.name}: {variant.name} not measured past L_tr (card "
                          f"{snap.held_out(variant.card_set):.0f}% < {variant.bar:.0f}% at L_tr)", flush=True)
                continue
            out += [run_config(design, snap, results / snap.name, variant, method, [length], args.examples,
                               args.calibration, args.device) for method in methods]
    return out


def measure(design: Design, snap: Snap, args: argparse.Namespace) -> None:
    """Every cell of one snapshot (resumable), in :func:`planned`'s order; ``--worker I/K`` starts with every K-th
    cell from the I-th, then goes through the rest, so K processes on one snapshot each take their own cells first
    (a cell another process is computing is waited for, then found done)."""
    from lengthx.core.runner import Runner

    plan, (i, k) = planned(design, snap, args), getattr(args, "worker", None) or (0, 1)
    for cfg in plan[i::k] + [c for j, c in enumerate(plan) if j % k != i]:
        for cell in Runner(cfg).run():
            print(f"{snap.name}: {cell['cell']} {cell['status']} {cell.get('value', '')}", flush=True)


def pending(design: Design, snap: Snap, args: argparse.Namespace) -> list[str]:
    """The cells of :func:`planned` not done yet (no weights loaded: a cell's hash needs the tokenizer and digest)."""
    from lengthx.core.runner import Runner

    out = []
    for cfg in planned(design, snap, args):
        runner = Runner(cfg)
        out += [cell.key for cell, chash in runner.cells() if not runner.is_done(cell, chash)]
    return out


def replicate(design: Design, snaps: list[Snap], spec: str, args: argparse.Namespace) -> None:
    """One cell and its τ = 1 baseline again at :data:`REPLICATION_SEED` (``SNAPSHOT:VARIANT:LENGTH:METHOD``),
    into ``<results>/<snapshot>/replication``."""
    from lengthx.core.runner import Runner

    name, variant_name, length, method = spec.split(":")
    snap = next(s for s in snaps if s.name == name)
    for m in ("none", method):
        cfg = run_config(design, snap, Path(args.results) / name / "replication", design.variant(variant_name), m,
                         [int(length)], args.examples, args.calibration, args.device, seed=REPLICATION_SEED)
        for cell in Runner(cfg).run():
            print(f"{name} replication: {cell['cell']} {cell['status']} {cell.get('value', '')}", flush=True)


# ---- summarising -------------------------------------------------------------------------------------------
def cells_of(design: Design, store: ResultsStore, variant: Variant, lengths: list[int]) -> dict[str, Any]:
    """Per length: n, L_ex, the count its records hold, and per method accuracy, interval, τ, whether τ is a grid
    end short of its target, and the paired difference to τ = 1; τ = 1's change against L_tr."""
    ok = latest_ok(store.read())
    out: dict[str, Any] = {}
    base: dict[str, float] | None = None
    for length in lengths:
        rows = ok[(ok.task == variant.task) & (ok.setting == variant.label(length))]
        acc = {m: rows[(rows.method == m) & (rows.metric == "accuracy")] for m in METHODS}
        if acc["none"].empty:
            continue
        scores = {m: cell_scores(store, r.iloc[0], "accuracy") for m, r in acc.items() if not r.empty}
        ids = sorted(scores["none"])
        records = store.load_records(acc["none"].iloc[0].cell)
        counts = [int(records[i]["meta"][design.count_meta]) for i in ids
                  if design.count_meta in records[i].get("meta", {})]
        entry: dict[str, Any] = {"L_ex": float(acc["none"].iloc[0].L_ex), "n": len(ids), "methods": {},
                                 "held": [min(counts), max(counts)] if counts else None}
        for m, s in scores.items():
            shared = [i for i in ids if i in s]
            values = [s[i] for i in shared]
            row = acc[m].iloc[0]
            cell = {"acc": sum(values) / len(values), "ci": list(mean_ci(values)), "n": len(values),
                    "tau": float(row.tau) if str(row.tau) not in ("", "nan") else 1.0,
                    "short": str(row.message) == SHORT_OF_TARGET}
            if m != "none":
                cell["delta"] = list(difference_ci(values, [scores["none"][i] for i in shared]))
            entry["methods"][m] = cell
        if length == design.l_tr:  # `vs L_tr` only against L_tr itself (a replication store starts past it)
            base = scores["none"]
        elif base is not None and (common := sorted(set(base) & set(ids))):
            entry["vs_l_tr"] = list(difference_ci([scores["none"][i] for i in common], [base[i] for i in common]))
        out[str(length)] = entry
    return out


def variants_of(design: Design, snap: Snap, results: Path, lengths: list[int]) -> dict[str, Any]:
    """A snapshot's measured variants, the variants it does not handle at L_tr (with the card's score), and its
    replications where measured."""
    store = ResultsStore(results / snap.name)
    out = {"variants": {v.name: cells_of(design, store, v, lengths) for v in design.variants},
           "not_handled": {v.name: snap.held_out(v.card_set) for v in design.variants
                           if v.card_set is not None and not handled(snap, v)}}
    replication = results / snap.name / "replication"
    if (replication / "results.csv").is_file():
        rep = ResultsStore(replication)
        out["replication"] = {v.name: cells_of(design, rep, v, lengths) for v in design.variants}
    return out


def pct(cell: dict[str, Any] | None) -> str:
    """Accuracy with its interval, ``–`` where the cell was not measured."""
    if not cell:
        return "–"
    lo, hi = cell["ci"]
    return f"{cell['acc']:.0f} [{lo:.0f}, {hi:.0f}]"


def delta(d: list[float] | None) -> str:
    if d is None:
        return "–"
    lo, hi = d[1], d[2]
    verdict = "" if lo <= 0 <= hi else " ✓" if lo > 0 else " ✗"
    return f"{d[0]:+.0f} [{lo:+.0f}, {hi:+.0f}]{verdict}"


def tau(cell: dict[str, Any]) -> str:
    return f"{cell['tau']:.2f}{UNALIGNED_MARK if cell.get('short') else ''}"


def held(cell: dict[str, Any]) -> str:
    """The count the setting's records hold: one number, or its range."""
    lo, hi = cell["held"] or (None, None)
    return "–" if lo is None else str(lo) if lo == hi else f"{lo}-{hi}"


def rule(cell: dict[str, Any] | None, with_tau: bool = True) -> str:
    if not cell:
        return "–"
    return delta(cell.get("delta")) + (f" ({tau(cell)})" if with_tau else "")


def variant_table(design: Design, title: str, cells: dict[str, Any], card: float | None = None,
                  bar: float = 0.0) -> list[str]:
    """One table: a row per length, τ = 1 and every rule with its τ and paired difference; ``card``: the L_tr
    accuracy below the bar that kept the variant from lengths past L_tr."""
    rules = [m for m in design.methods if m != "none"]
    out = [f"### {title}", "", f"| L_ex / L_tr | {design.held} | n | τ = 1 | vs L_tr | "
           + " | ".join(f"{NAMES[m]} (τ) | Δ" for m in rules) + " |", "|" + "---|" * (5 + 2 * len(rules))]
    for cell in cells.values():
        ms = cell["methods"]
        parts = [f"{cell['L_ex'] / design.l_tr:.1f}", held(cell), str(cell["n"]), pct(ms["none"]),
                 delta(cell.get("vs_l_tr"))]
        for m in rules:
            c = ms.get(m)
            parts += [f"{pct(c)} ({tau(c)})", delta(c.get("delta"))] if c else ["–", "–"]
        out.append("| " + " | ".join(parts) + " |")
    if card is not None:
        out += ["", f"Not measured past L_tr: the card scores {card:.0f}% at L_tr, below the bar ({bar:.0f}%), so a "
                "fall past L_tr could be the structure the snapshot does not handle, not the length."]
    return out + [""]


def headline_rows(design: Design, summary: dict[str, Any], name: str, records: str, rules: tuple[str, ...]) -> list[str]:
    """A headline table's rows of one snapshot and variant past L_tr, each followed by its replication at
    :data:`REPLICATION_SEED` where one was measured."""
    out = []
    for length, cell in summary["variants"][name].items():
        if int(length) <= design.l_tr:
            continue
        ms = cell["methods"]
        out.append(f"| {summary['snapshot']} | {records} | {cell['L_ex'] / design.l_tr:.0f}x | {held(cell)} | "
                   f"{pct(ms['none'])} | {delta(cell.get('vs_l_tr'))} | " + " | ".join(rule(ms.get(m)) for m in rules) + " |")
        rep = summary.get("replication", {}).get(name, {}).get(length)
        if rep:
            rm = rep["methods"]
            out.append(f"| ↳ seed {REPLICATION_SEED} | | | {held(rep)} | {pct(rm['none'])} | | "
                       + " | ".join(rule(rm.get(m)) for m in rules) + " |")
    return out


def owed(design: Design, summaries: list[dict[str, Any]]) -> list[str]:
    """``--replicate`` specs still owed: every cell past L_tr where a paper rule's paired difference excludes 0, a
    gain or a cost, and that rule was not measured again at :data:`REPLICATION_SEED`."""
    out = []
    for s in summaries:
        for name, cells in s["variants"].items():
            for length, cell in cells.items():
                rep = s.get("replication", {}).get(name, {}).get(length, {}).get("methods", {})
                out += [f"{s['snapshot']}:{name.replace(' ', '')}:{length}:{m}" for m in PAPER_METHODS
                        if int(length) > design.l_tr and (c := cell["methods"].get(m))
                        and (c["delta"][1] > 0 or c["delta"][2] < 0) and m not in rep]
    return out


def arguments(doc: str, results: Path, design: Design, worker_spec: Callable[[str], tuple[int, int]],
              only: bool = True) -> argparse.ArgumentParser:
    """The command line both studies share (their module docs show it); ``only``: the study measures several
    snapshots, so ``--only`` can narrow them."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=str(results))
    p.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS))
    p.add_argument("--examples", type=int, default=60)
    p.add_argument("--calibration", type=int, default=2, help="Algorithm 1's calibration examples per setting")
    p.add_argument("--methods", nargs="+", default=list(design.methods), choices=list(METHODS),
                   help="only these methods (the study's table wants them all)")
    if only:
        p.add_argument("--only", nargs="*", default=None, help="measure only these snapshots")
    p.add_argument("--variants", nargs="+", default=[v.name for v in design.variants],
                   choices=[v.name for v in design.variants], help="these variants, in this order")
    p.add_argument("--replicate", nargs="*", default=[], help="SNAPSHOT:VARIANT:LENGTH:METHOD cells to measure again "
                   f"at task seed {REPLICATION_SEED}")
    p.add_argument("--render-only", action="store_true")
    p.add_argument("--owed", action="store_true", help="print the --replicate specs still owed and stop")
    p.add_argument("--worker", type=worker_spec, default=None, metavar="I/K", help="one of K processes on the same "
                   "snapshots: start with every K-th cell from the I-th (scripts/gpu_runs/gpu_study.sh)")
    p.add_argument("--no-render", action="store_true", help="measure only (side by side: --render-only after)")
    p.add_argument("--pending", action="store_true", help="list the cells not measured yet, per snapshot, and stop")
    p.add_argument("--ship", default=None, help="copy the snapshot the rule picks into this directory and stop")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="auto")
    return p
