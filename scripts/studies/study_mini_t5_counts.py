#!/usr/bin/env python
"""Paper A's retrieval claim on the first-of-K topics stand-in, count and length separated (docs/mini-t5-study.md).

The second retrieval study. Its snapshots (``scripts/train_mini_t5.py --topics-records counts``) learned to find
the first of 1-6 conversations at L_tr; this script measures every snapshot with the harness (``lengthx run``,
mini profile), in the order the doc fixed:

- **variants**: passkey; topics on the benchmark's records (the count grows with the length), in the stand-in's
  short format; topics with exactly K = 1, 3 and 5 conversations at every length (``task.num_topics``: the
  matched-count table);
- at ``--lengths`` tokens (L_tr, about 4x, 10x and 29x), methods τ = 1, log τ, P_max and H (Algorithm 1 on the
  paper's grid) and, as an extension, P_max and H by bisection on the grid extended to 0.2
  (``method.tau_min=0.2``), the same examples for every method;
- accuracy with its Wilson interval, each rule's paired difference to τ = 1 (Newcombe), τ = 1's paired change
  against L_tr, the conversations each topics setting really holds, and ``*`` where Algorithm 1's τ is its grid's
  end short of S̄_tr(1);
- ``--replicate SNAPSHOT:VARIANT:LENGTH:METHOD`` measures a cell again at task seed 7 (never used by the study or
  the cards), into ``<results>/<snapshot>/replication``: a positive finding is stated only beside its replication.

    python scripts/studies/study_mini_t5_counts.py --only seed0/step-01800        # measure (resumable), then render
    python scripts/studies/study_mini_t5_counts.py --render-only                   # study.md and study.json
    python scripts/studies/study_mini_t5_counts.py --owed                          # the replications still owed
    python scripts/studies/study_mini_t5_counts.py --pending                       # the cells not measured yet
    python scripts/studies/study_mini_t5_counts.py --ship lengthx/checkpoints/mini-t5   # ship the snapshot the rule picks
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for entry in (ROOT, ROOT / "scripts" / "studies"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from study_mini_t5 import Snapshot, _pct, snapshots  # noqa: E402
from study_workers import carry_line, worker_spec  # noqa: E402  (--worker, --pending)

from lengthx.core.store import SHORT_OF_TARGET, UNALIGNED_MARK, ResultsStore  # noqa: E402
from lengthx.report.tables.intervals import cell_scores, difference_ci, mean_ci  # noqa: E402
from lengthx.report.tables.render import latest_ok  # noqa: E402

L_TR = 256
DEFAULT_LENGTHS = (256, 1024, 2560, 7424)  # L_tr, 4x, 10x, 29x
COUNTS = (1, 2, 3, 4, 5)  # the card's K at L_tr (5: the largest K whose records of these draws fit L_tr)
MATCHED = (1, 3, 5)  # the matched-count table's K
BAR = {"passkey": 95.0, "topics": 90.0}
REPLICATION_SEED = 7


@dataclass(frozen=True)
class Variant:
    """A row group of the study: a task and its overrides."""

    name: str
    overrides: tuple[str, ...]
    count: int | None = None

    def label(self, length: int) -> str:
        """The setting's label in results rows (lengthx.tasks.base.all_settings)."""
        return f"{length}tokens" + (f"-{self.count}topics" if self.count is not None else "")

    @property
    def card_set(self) -> str:
        """The card's held-out set at L_tr that speaks for this variant."""
        return self.name if self.count is None else f"topics-k{self.count}"

    @property
    def bar(self) -> float:
        return BAR[self.name.split()[0]]


VARIANTS = (Variant("passkey", ("task=passkey",)), Variant("topics", ("task=topics", "task.format=short")),
            *(Variant(f"topics K={k}", ("task=topics", "task.format=short", f"task.num_topics={k}"), k)
              for k in MATCHED))
# method name in rows -> its overrides; the last two are the extension beyond the paper's grid
METHODS = {"none": ("method=none",), "log": ("method=log",), "pmax": ("method=pmax",),
           "entropy": ("method=entropy",),
           "pmax-bisect-min0.2": ("method=pmax", "method.search=bisect", "method.tau_min=0.2"),
           "entropy-bisect-min0.2": ("method=entropy", "method.search=bisect", "method.tau_min=0.2")}
PAPER_METHODS = ("log", "pmax", "entropy")
EXTENSION = ("pmax-bisect-min0.2", "entropy-bisect-min0.2")
NAMES = {"none": "τ = 1", "log": "log", "pmax": "P_max", "entropy": "H", "pmax-bisect-min0.2": "P_max ≥0.2 (ext.)",
         "entropy-bisect-min0.2": "H ≥0.2 (ext.)"}


# ---- the card and the selection rule -----------------------------------------------------------------------
def held_out(snap: Snapshot, name: str) -> float:
    """The card's held-out accuracy at L_tr for ``passkey``, ``topics`` or ``topics-k<K>``."""
    return snap.held_out(name)


def meets_bar(snap: Snapshot) -> bool:
    """Passkey ≥ 95% and topics ≥ 90% on the benchmark's records and at every K = 1..5 (docs/mini-t5-study.md)."""
    topics = ["topics", *(f"topics-k{k}" for k in COUNTS)]
    return held_out(snap, "passkey") >= BAR["passkey"] and all(held_out(snap, t) >= BAR["topics"] for t in topics)


SEEDS = (0, 1)
LAST_STEP = 3200  # the budget's last snapshot (docs/mini-t5-study.md)


def handled(snap: Snapshot, variant: Variant) -> bool:
    """Whether the snapshot handles the variant's structure at L_tr (its card at the bar): only then is the variant
    measured past L_tr, since a fall there could otherwise be the structure, not the length (docs/mini-t5-study.md)."""
    return held_out(snap, variant.card_set) >= variant.bar


def select(snaps: list[Snapshot]) -> Snapshot | None:
    """The earliest snapshot of seed 0 at the bar, else of seed 1; fallback: the highest smallest topics accuracy
    over K = 1..5 among those at the passkey bar (seed 0 before seed 1, the earlier on ties). ``None`` while the
    rule cannot decide yet: a seed with no snapshot at the bar has not reached its last step, so a later snapshot of
    it (or of an earlier seed) could still be the pick."""
    for seed in SEEDS:
        mine = [s for s in snaps if s.seed == seed]
        hit = next((s for s in mine if meets_bar(s)), None)
        if hit is not None:
            return hit
        if not any(s.step == LAST_STEP for s in mine):
            return None  # undecided: this seed's later snapshots may still reach the bar
    passing = [s for s in snaps if held_out(s, "passkey") >= BAR["passkey"]]
    return max(passing, key=lambda s: (min(held_out(s, f"topics-k{k}") for k in COUNTS), -s.seed, -s.step),
               default=None)


# ---- measuring ---------------------------------------------------------------------------------------------
def run_config(snap: Snapshot, store: Path, variant: Variant, method: str, lengths: list[int], examples: int,
               calibration: int, device: str, seed: int = 0) -> Any:
    from lengthx.models.minis import compose_run

    return compose_run(["model=mini-t5", f"model.path={snap.path}", f"model.l_tr={L_TR}", *variant.overrides,
                        *METHODS[method], f"task.settings=[{','.join(map(str, lengths))}]", "task.unit=tokens",
                        f"task.num_examples={examples}", f"task.seed={seed}", f"results_dir={store}",
                        f"calibration.num_examples={calibration}", f"device={device}"])


def planned(snap: Snapshot, args: argparse.Namespace) -> list[Any]:
    """The run configurations of one snapshot's cells, one cell each, in the order the study measures them: lengths
    in order, so a short session finishes the short ones, and at each length the paper's methods on every variant
    before the extension's; past L_tr only the variants the snapshot handles at L_tr (docs/mini-t5-study.md)."""
    results = Path(args.results)
    paper = [m for m in METHODS if m not in EXTENSION and m in args.methods]
    extension = [m for m in EXTENSION if m in args.methods]
    out = []
    for length, methods in ((n, ms) for n in args.lengths for ms in (paper, extension)):  # the extension last
        for variant in sorted((v for v in VARIANTS if v.name in args.variants), key=lambda v: args.variants.index(v.name)):
            if length > L_TR and not handled(snap, variant):
                if methods is extension:
                    print(f"{snap.name}: {variant.name} not measured past L_tr (card "
                          f"{held_out(snap, variant.card_set):.0f}% < {variant.bar:.0f}% at L_tr)", flush=True)
                continue
            out += [run_config(snap, results / snap.name, variant, method, [length], args.examples, args.calibration,
                               args.device) for method in methods]
    return out


def measure(snap: Snapshot, args: argparse.Namespace) -> None:
    """Every cell of one snapshot (resumable), in :func:`planned`'s order; ``--worker I/K`` starts with every K-th
    cell from the I-th, then goes through the rest, so K processes on one snapshot each take their own cells first
    (a cell another process is computing is waited for, then found done)."""
    from lengthx.core.runner import Runner

    plan, (i, k) = planned(snap, args), getattr(args, "worker", None) or (0, 1)
    for cfg in plan[i::k] + [c for j, c in enumerate(plan) if j % k != i]:
        for cell in Runner(cfg).run():
            print(f"{snap.name}: {cell['cell']} {cell['status']} {cell.get('value', '')}", flush=True)


def pending(snap: Snapshot, args: argparse.Namespace) -> list[str]:
    """The cells of :func:`planned` not done yet (no weights loaded: a cell's hash needs the tokenizer and digest)."""
    from lengthx.core.runner import Runner

    out = []
    for cfg in planned(snap, args):
        runner = Runner(cfg)
        out += [cell.key for cell, chash in runner.cells() if not runner.is_done(cell, chash)]
    return out


def replicate(spec: str, args: argparse.Namespace) -> None:
    """One cell and its τ = 1 baseline again at task seed 7 (``SNAPSHOT:VARIANT:LENGTH:METHOD``; a variant's
    spaces may be left out: ``topicsK=1``)."""
    from lengthx.core.runner import Runner

    name, variant_name, length, method = spec.split(":")
    snap = next(s for s in snapshots(Path(args.results)) if s.name == name)
    variant = next(v for v in VARIANTS if v.name.replace(" ", "") == variant_name.replace(" ", ""))  # topicsK=1
    for m in ("none", method):
        cfg = run_config(snap, Path(args.results) / name / "replication", variant, m, [int(length)], args.examples,
                         args.calibration, args.device, seed=REPLICATION_SEED)
        for cell in Runner(cfg).run():
            print(f"{name} replication: {cell['cell']} {cell['status']} {cell.get('value', '')}", flush=True)


# ---- summarising -------------------------------------------------------------------------------------------
def cells_of(store: ResultsStore, variant: Variant, lengths: list[int]) -> dict[str, Any]:
    """Per length: n, L_ex, the conversations its records hold, and per method accuracy, interval, τ, whether τ
    is a grid end short of its target, and the paired difference to τ = 1; τ = 1's change against L_tr."""
    ok = latest_ok(store.read())
    task = variant.overrides[0].split("=")[1]
    out: dict[str, Any] = {}
    base: dict[str, float] | None = None
    for length in lengths:
        label = variant.label(length)
        rows = ok[(ok.task == task) & (ok.setting == label)]
        acc = {m: rows[(rows.method == m) & (rows.metric == "accuracy")] for m in METHODS}
        if acc["none"].empty:
            continue
        scores = {m: cell_scores(store, r.iloc[0], "accuracy") for m, r in acc.items() if not r.empty}
        ids = sorted(scores["none"])
        records = store.load_records(acc["none"].iloc[0].cell)
        counts = [int(records[i]["meta"]["n_topics"]) for i in ids if "n_topics" in records[i].get("meta", {})]
        entry: dict[str, Any] = {"L_ex": float(acc["none"].iloc[0].L_ex), "n": len(ids), "methods": {},
                                 "topics": [min(counts), max(counts)] if counts else None}
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
        if length == L_TR:  # `vs L_tr` only against L_tr itself (a replication store starts past it: no column)
            base = scores["none"]
        elif base is not None and (common := sorted(set(base) & set(ids))):
            entry["vs_l_tr"] = list(difference_ci([scores["none"][i] for i in common], [base[i] for i in common]))
        out[str(length)] = entry
    return out


def summarize(snap: Snapshot, results: Path, lengths: list[int]) -> dict[str, Any]:
    """Every variant of one snapshot, and its replications."""
    store = ResultsStore(results / snap.name)
    card = {t: held_out(snap, t) for t in ("passkey", "topics", *(f"topics-k{k}" for k in COUNTS))}
    out = {"snapshot": snap.name, "seed": snap.seed, "step": snap.step, "card": card, "meets_bar": meets_bar(snap),
           "variants": {v.name: cells_of(store, v, lengths) for v in VARIANTS},
           "not_handled": {v.name: held_out(snap, v.card_set) for v in VARIANTS if not handled(snap, v)}}
    replication = results / snap.name / "replication"
    if (replication / "results.csv").is_file():
        rep = ResultsStore(replication)
        out["replication"] = {v.name: cells_of(rep, v, lengths) for v in VARIANTS}
    return out


def _delta(d: list[float] | None) -> str:
    if d is None:
        return "–"
    lo, hi = d[1], d[2]
    verdict = "" if lo <= 0 <= hi else " ✓" if lo > 0 else " ✗"
    return f"{d[0]:+.0f} [{lo:+.0f}, {hi:+.0f}]{verdict}"


def _tau(cell: dict[str, Any]) -> str:
    return f"{cell['tau']:.2f}{UNALIGNED_MARK if cell.get('short') else ''}"


def variant_table(title: str, cells: dict[str, Any], card: float | None = None, bar: float = 0.0) -> list[str]:
    """One table: a row per length, τ = 1 and every rule with its τ and paired difference; ``card``: the L_tr
    accuracy below the bar that kept the variant from lengths past L_tr."""
    rules = [m for m in METHODS if m != "none"]
    out = [f"### {title}", "", "| L_ex / L_tr | topics held | n | τ = 1 | vs L_tr | "
           + " | ".join(f"{NAMES[m]} (τ) | Δ" for m in rules) + " |", "|" + "---|" * (5 + 2 * len(rules))]
    for cell in cells.values():
        ms = cell["methods"]
        parts = [f"{cell['L_ex'] / L_TR:.1f}", _held(cell), str(cell["n"]), _pct(ms["none"]), _delta(cell.get("vs_l_tr"))]
        for m in rules:
            c = ms.get(m)
            parts += [f"{_pct(c)} ({_tau(c)})", _delta(c.get("delta"))] if c else ["–", "–"]
        out.append("| " + " | ".join(parts) + " |")
    if card is not None:
        out += ["", f"Not measured past L_tr: the card scores {card:.0f}% at L_tr, below the bar ({bar:.0f}%), so a "
                "fall past L_tr could be the structure the snapshot does not handle, not the length."]
    return out + [""]


def render_markdown(summaries: list[dict[str, Any]], every: list[Snapshot], picked: Snapshot | None) -> str:
    """study.md: the cards and the selection, the matched-count table across snapshots, then every snapshot."""
    out = ["# mini-t5 first-of-K study: measured (scripts/studies/study_mini_t5_counts.py)", "",
           "Rendered from the records in this directory by `python scripts/studies/study_mini_t5_counts.py --render-only`; "
           "do not edit by hand. Accuracy in % with 95% Wilson intervals; Δ: paired difference to τ = 1 on the same "
           "examples, 95% Newcombe interval (✓ excludes 0 upwards, ✗ downwards); `vs L_tr`: τ = 1's paired change "
           "against L_tr; `topics held`: the conversations the records hold. "
           f"τ marked {UNALIGNED_MARK}: Algorithm 1 stopped at its grid's end (the paper's 0.50, or 0.20 for the "
           "extension) without reaching S̄_tr(1). `≥0.2 (ext.)`: bisection on the grid extended to 0.2, beyond "
           "the paper. A Δ is a finding only beside its replication at task seed 7.", "",
           "## Cards and selection", "",
           "Held-out accuracy at L_tr = 256 (n = 60 per set, task seeds 500000+). The rule (docs/mini-t5-study.md, "
           "fixed before training): the earliest snapshot of seed 0 with passkey ≥ 95% and topics ≥ 90% on the "
           "benchmark's records and at every K = 1..5; else seed 1's earliest; fallback: the highest smallest topics "
           "accuracy over K among those at the passkey bar. "
           + (f"**Picked: {picked.name}** ({'at the bar' if meets_bar(picked) else 'by the fallback, below the bar'})."
              if picked else "**Not decided yet**: the rule needs seed 0's snapshots up to its last step "
              f"({LAST_STEP}) before another seed's can be picked."), "",
           "| snapshot | passkey | topics | " + " | ".join(f"K = {k}" for k in COUNTS) + " | at the bar |",
           "|" + "---|" * (4 + len(COUNTS))]
    for s in every:
        out.append(f"| {s.name} | {held_out(s, 'passkey'):.0f} | {held_out(s, 'topics'):.0f} | "
                   + " | ".join(f"{held_out(s, f'topics-k{k}'):.0f}" for k in COUNTS)
                   + f" | {'yes' if meets_bar(s) else 'no'} |")
    out += ["", "## Matched count: topics with exactly K conversations at every length", ""]
    measured = [s for s in summaries if any(s["variants"][f"topics K={k}"] for k in MATCHED)]
    if not measured:
        out += ["(not measured yet)", ""]
    for s in measured:
        for k in MATCHED:
            name = f"topics K={k}"
            if s["variants"][name]:
                out += variant_table(f"{s['snapshot']}: topics, exactly K = {k} conversations", s["variants"][name],
                                     s["not_handled"].get(name), BAR["topics"])
    out += ["## Every snapshot", ""]
    for s in summaries:
        for v in VARIANTS:
            if v.count is None and s["variants"][v.name]:
                out += variant_table(f"{s['snapshot']}: {v.name}", s["variants"][v.name],
                                     s["not_handled"].get(v.name), v.bar)
        for name, cells in s.get("replication", {}).items():
            if cells:
                out += variant_table(f"{s['snapshot']}: {name}, replication at task seed {REPLICATION_SEED}", cells)
    return "\n".join(out) + "\n"


HEADLINE_RULES = tuple(m for m in METHODS if m != "none")


def _held(cell: dict[str, Any]) -> str:
    lo, hi = cell["topics"] or (None, None)
    return "–" if lo is None else str(lo) if lo == hi else f"{lo}-{hi}"


def _rule(cell: dict[str, Any] | None, with_tau: bool = True) -> str:
    if not cell:
        return "–"
    return _delta(cell.get("delta")) + (f" ({_tau(cell)})" if with_tau else "")


def headline(summaries: list[dict[str, Any]]) -> str:
    """headline.md (docs/results-paper-a.md includes it): every cell past L_tr of the snapshots at the bar, one table each for
    the matched counts, the benchmark's records and passkey, each row followed by its replication at task seed 7
    where one was measured."""
    head = ("| snapshot | records | L_ex / L_tr | topics held | τ = 1 | vs L_tr | "
            + " | ".join(f"Δ {NAMES[m]} (τ)" for m in HEADLINE_RULES) + " |")
    rule = "|" + "---|" * (6 + len(HEADLINE_RULES))
    groups = {"matched": (["topics K=1", "topics K=3", "topics K=5"], "**Matched count**: records of exactly K "
                          "conversations at every length (a count every snapshot here handles at L_tr)"),
              "benchmark": (["topics"], "**The benchmark's records**: the count of conversations grows with the "
                            "length, past the 1-6 of training"),
              "passkey": (["passkey"], "**Passkey**")}
    at_bar = [s for s in summaries if s["meets_bar"]]
    out = ["<!-- rendered by scripts/studies/study_mini_t5_counts.py from results/mini-t5-counts; do not edit -->",
           f"n = 60 per cell; Δ: paired difference to τ = 1 on the same examples, 95% Newcombe interval (✓/✗: it "
           f"excludes 0); `vs L_tr`: τ = 1's paired change against L_tr; τ in parentheses, {UNALIGNED_MARK} where "
           "Algorithm 1 stopped at its grid's end short of S̄_tr(1); `≥0.2 (ext.)`: bisection on the grid extended to "
           f"0.2, beyond the paper, never replicated (a description, not a finding); `↳ seed {REPLICATION_SEED}`: the "
           "same cell on 60 examples the study never used, where a rule's difference excluded 0 (a – where that rule's "
           "was not re-measured).",
           ""]
    for names, text in groups.values():
        out += [text, "", head, rule]
        for s in at_bar:
            for name in names:
                records = "K = " + name.split("=")[1] if "K=" in name else "benchmark" if name == "topics" else "passkey"
                for length, cell in s["variants"][name].items():
                    if int(length) <= L_TR:
                        continue
                    ms = cell["methods"]
                    out.append(f"| {s['snapshot']} | {records} | {cell['L_ex'] / L_TR:.0f}x | {_held(cell)} | "
                               f"{_pct(ms['none'])} | {_delta(cell.get('vs_l_tr'))} | "
                               + " | ".join(_rule(ms.get(m)) for m in HEADLINE_RULES) + " |")
                    rep = s.get("replication", {}).get(name, {}).get(length)
                    if rep:
                        rm = rep["methods"]
                        out.append(f"| ↳ seed {REPLICATION_SEED} | | | {_held(rep)} | {_pct(rm['none'])} | | "
                                   + " | ".join(_rule(rm.get(m)) for m in HEADLINE_RULES) + " |")
        out.append("")
    return "\n".join(out)


def owed(summaries: list[dict[str, Any]]) -> list[str]:
    """``--replicate`` specs still owed: every cell past L_tr where a paper rule's paired difference excludes 0, a
    gain or a cost, and that rule was not measured again at task seed 7 (docs/mini-t5-study.md, Replication)."""
    out = []
    for s in summaries:
        for name, cells in s["variants"].items():
            for length, cell in cells.items():
                rep = s.get("replication", {}).get(name, {}).get(length, {}).get("methods", {})
                out += [f"{s['snapshot']}:{name.replace(' ', '')}:{length}:{m}" for m in PAPER_METHODS
                        if int(length) > L_TR and (c := cell["methods"].get(m)) and (c["delta"][1] > 0 or c["delta"][2] < 0)
                        and m not in rep]
    return out


def study(results: Path, lengths: list[int]) -> tuple[str, dict[str, Any]]:
    every = snapshots(results)
    summaries = [summarize(s, results, lengths) for s in every if (results / s.name / "results.csv").is_file()]
    picked = select(every)
    return render_markdown(summaries, every, picked), {"picked": picked.name if picked else None,
                                                       "snapshots": summaries}


def render(results: Path, lengths: list[int]) -> str:
    text, data = study(results, lengths)
    (results / "study.json").write_text(json.dumps(data, indent=1))
    (results / "study.md").write_text(text)
    (results / "headline.md").write_text(headline(data["snapshots"]))
    return text


def ship(results: Path, target: Path) -> Snapshot:
    """Copy the picked snapshot into ``target`` with its card and a selection section (lengthx.minis.ship)."""
    from lengthx.minis.ship import ship_snapshot

    every = snapshots(results)
    picked = select(every)
    if picked is None:
        raise SystemExit(f"the selection rule cannot pick from {results / 'snapshots'} yet (a seed without a snapshot "
                         f"at the bar has not reached step {LAST_STEP}, or none is at the passkey bar): nothing shipped. "
                         "Fix: train the seeds to their last snapshot (make mini-t5-counts-study)")
    rows = "\n".join(f"| {s.name} | {held_out(s, 'passkey'):.0f} | {held_out(s, 'topics'):.0f} | "
                     + " | ".join(f"{held_out(s, f'topics-k{k}'):.0f}" for k in COUNTS) + " |" for s in every)
    section = (f"\n## Selection (docs/mini-t5-study.md, the first-of-K stand-in)\n\nSnapshot `{picked.name}` of "
               "`results/mini-t5-counts/`, picked by the rule fixed before training: the earliest snapshot of seed 0 "
               "with held-out passkey ≥ 95% and topics ≥ 90% on the benchmark's records and at every K = 1..5 "
               "conversations at L_tr; else seed 1's earliest; fallback: the highest smallest topics accuracy over K. "
               + ("It meets the bar." if meets_bar(picked) else "No snapshot met the bar: the fallback picked it.")
               + "\n\n| snapshot | passkey | topics | " + " | ".join(f"K = {k}" for k in COUNTS) + " |\n|"
               + "---|" * (3 + len(COUNTS)) + "\n" + rows + "\n")
    ship_snapshot(picked.path, target, section)
    return picked


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=str(ROOT / "results" / "mini-t5-counts"))
    p.add_argument("--lengths", type=int, nargs="+", default=list(DEFAULT_LENGTHS))
    p.add_argument("--examples", type=int, default=60)
    p.add_argument("--calibration", type=int, default=2, help="Algorithm 1's calibration examples per setting")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS),
                   help="only these methods (the study's table wants them all)")
    p.add_argument("--only", nargs="*", default=None, help="measure only these snapshots (seedS/step-NNNNN)")
    p.add_argument("--variants", nargs="+", default=[v.name for v in VARIANTS], choices=[v.name for v in VARIANTS],
                   help="these variants, in this order")
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
    args = p.parse_args(argv)
    results = Path(args.results)
    if args.owed:
        print("\n".join(owed(study(results, sorted({*DEFAULT_LENGTHS, *args.lengths}))[1]["snapshots"])))
        return
    if args.ship:
        print(f"shipped {ship(results, Path(args.ship)).name} to {args.ship}")
        return
    if args.pending:
        left = {}
        for snap in snapshots(results):
            if args.only is None or snap.name in args.only:
                cells = pending(snap, args)
                print(f"{snap.name}: {len(cells)} cells pending", *cells, sep="\n  ", flush=True)
                left[snap.name] = len(cells)
        print(carry_line(results, left))
        return
    if not args.render_only:
        import torch

        torch.set_num_threads(args.threads)
        ordered = sorted(snapshots(results), key=lambda s: s != select(snapshots(results)))  # the picked one first
        for snap in ordered:
            if args.only is None or snap.name in args.only:
                measure(snap, args)
        for spec in args.replicate:
            replicate(spec, args)
    if not args.no_render:
        print(render(results, sorted({*DEFAULT_LENGTHS, *args.lengths})))


if __name__ == "__main__":
    main()
