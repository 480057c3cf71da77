#!/usr/bin/env python
"""Paper A's retrieval claim on lines, with the lookup stand-in, count and length separated (docs/mini-t5-lookup.md,
"The lines study").

The lookup stand-in's snapshots (``make mini-t5-lookup-study``) learned to find the line a key names at L_tr; the
selection rule picks one of them on L_tr alone, and this script measures it with the harness (``lengthx run``,
mini profile), as the first-of-K study measured topics (``study_mini_t5_counts.py``, the shared
``study_cells.py``):

- **variants**: lines with exactly K = 2, 6 and 11 lines at every length (``task.num_lines``: the K lines at seeded
  depths in filler, the matched-count table), and the benchmark's records (as many lines as the length holds, so
  the count grows past the 10-12 the L_tr records hold), in the stand-in's short format;
- at ``--lengths`` tokens (L_tr, about 4x, 10x and 29x), τ = 1, log τ, P_max and H (Algorithm 1 on the paper's
  grid), the same examples for every method; past L_tr only the variants the snapshot handles at L_tr;
- accuracy with its Wilson interval, each rule's paired difference to τ = 1 (Newcombe), τ = 1's paired change
  against L_tr, the lines each setting's records really hold, and ``*`` where Algorithm 1's τ is its grid's end;
- ``--replicate SNAPSHOT:VARIANT:LENGTH:METHOD`` measures a cell again at task seed 7: a difference is stated only
  beside its replication.

    python scripts/studies/study_mini_t5_lines.py --pick                    # the snapshot the rule picks, or why not yet
    python scripts/studies/study_mini_t5_lines.py --ship lengthx/checkpoints/mini-t5-lookup
    python scripts/studies/study_mini_t5_lines.py                          # measure the picked snapshot, then render
    python scripts/studies/study_mini_t5_lines.py --owed                   # the replications still owed
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for entry in (ROOT, ROOT / "scripts" / "studies"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

import study_cells  # noqa: E402
from lookup_filled import by_count, padded  # noqa: E402
from study_cells import DEFAULT_LENGTHS, REPLICATION_SEED, Design, Variant, arguments, headline_rows  # noqa: E402
from study_workers import worker_spec  # noqa: E402

from lengthx.core.store import UNALIGNED_MARK  # noqa: E402

L_TR = 256
LOOKUP = ROOT / "results" / "mini-t5-lookup"  # the stand-in's training study: snapshots/, filled/
GATE = 90.0  # lines at L_tr (docs/mini-t5-lookup.md, "Card and gate")
MATCHED = (2, 6, 11)  # the matched-count table's K: F's padded card sets (11: the largest count nearly every draw fits)
# the selection rule's order of variants, and the last step of each one's budget (docs/mini-t5-lookup.md)
ORDER = ("warm", "pieces", "pieces_more", "scratch", "scratch_more", "fill")
LAST_STEP = 20_000
PADDED_CHECK = (2, 11, 12)  # the GO check in the rule: K lines padded to L_tr (filled.md) for the gates without them
PADDED_BAR = 85.0
FILLED = LOOKUP / "filled"  # the padded check's stores (scripts/studies/lookup_filled.py)
GO_CHECK = LOOKUP / "go-check"  # each picked snapshot's GO check, go-check/<variant>/step-N (the shipped mapping)
GO_COUNTS = (2, 12)  # the GO asks ≥ GO_BAR at 2 lines and the largest count the L_tr records hold
GO_BAR = 85.0  # the GO bar (docs/mini-t5-lookup.md, "The GO check in the rule")
GO_MODEL = "flan-t5-large"  # the GO check's command runs the mini profile's Flan-T5 row, handed to the stand-in
HEADLINE_RULES = ("log", "pmax", "entropy")
TRAINED_AS = "The `mini` profile's stand-in for Flan-T5 (`conf/model/mini-t5.yaml`)"  # lengthx.minis.retrieval_card
SHIPPED_AS = ("The `mini` profile's stand-in for Flan-T5 on lines (`conf/model/mini-t5-lookup.yaml`; "
              "`conf/model/mini-t5.yaml` hands lines to it, `task_minis`)")


@dataclass(frozen=True)
class LookupSnapshot:
    """One snapshot of the lookup study, named by its directory: ``<variant>/step-NNNNN`` under
    ``results/mini-t5-lookup/snapshots``."""

    path: Path

    @property
    def variant(self) -> str:
        return self.path.parent.name

    @property
    def step(self) -> int:
        return int(self.path.name.removeprefix("step-"))

    @property
    def name(self) -> str:
        return f"{self.variant}/{self.path.name}"

    @cached_property
    def card(self) -> dict[str, float]:
        """Its held-out accuracy at L_tr per set (``curve.json``'s ``final``)."""
        return json.loads((self.path / "curve.json").read_text())["final"]

    @cached_property
    def padded(self) -> dict[int, tuple[float, int]]:
        """The padded check's cells of this snapshot (task seed 600, 50 records), where they were run."""
        return padded(FILLED, self.path)

    def held_out(self, task: str) -> float:
        """The card's held-out accuracy at L_tr; a padded set the card does not hold (``lines-fill-n<K>``, only F's
        card has them) is read from the padded check where it was run, else 0."""
        if f"{task}@{L_TR}" in self.card:
            return float(self.card[f"{task}@{L_TR}"])
        fill = re.fullmatch(r"lines-fill-n(\d+)", task)
        return self.padded.get(int(fill[1]), (0.0, 0))[0] if fill else 0.0

    @cached_property
    def meets_gate(self) -> bool:
        """Its card's own bar, as the trainer stated it (the card's first line, lengthx.minis.retrieval_card)."""
        return "meets the retrieval bar" in (self.path / "README.md").read_text().splitlines()[0]

    @cached_property
    def go_check(self) -> dict[int, tuple[float, int]]:
        """Its GO check where it was run (shipped, through the mini profile's mapping): accuracy and records per K
        from ``go-check/<variant>/step-N``."""
        return by_count(GO_CHECK / self.name, GO_MODEL)

    def go_missed(self) -> bool:
        """The rule for a pick that fails the GO check: measured, and short of :data:`GO_BAR` at 2 or 12 lines."""
        return any(self.go_check.get(k, (100.0, 0))[0] < GO_BAR for k in GO_COUNTS)

    def go_text(self) -> str:
        """Its GO check in a table cell: the accuracy at each count measured, and whether it holds."""
        if not self.go_check:
            return "not run"
        scores = ", ".join(f"{k} lines {v:.1f}% of {n}" for k, (v, n) in sorted(self.go_check.items()))
        done = all(k in self.go_check for k in GO_COUNTS)
        return f"{'missed' if self.go_missed() else 'held' if done else 'incomplete'} ({scores})"

    def padded_ok(self) -> bool:
        """The GO check in the rule: F's bar holds padded records already; any other variant's snapshot needs the
        padded check at 2, 11 and 12 lines ≥ 85%."""
        return self.variant == "fill" or all(self.padded.get(k, (0.0, 0))[0] >= PADDED_BAR for k in PADDED_CHECK)


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def snapshots(lookup: Path = LOOKUP) -> list[LookupSnapshot]:
    """Every complete snapshot of the lookup study, in the rule's order of variants, then by step."""
    found = []
    for card in (lookup / "snapshots").glob("*/step-*/README.md"):
        if re.fullmatch(r"step-\d+", card.parent.name) and card.parent.parent.name in ORDER:
            found.append(LookupSnapshot(card.parent))
    return sorted(found, key=lambda s: (ORDER.index(s.variant), s.step))


def select(snaps: list[LookupSnapshot]) -> tuple[LookupSnapshot | None, str]:
    """The selection rule (docs/mini-t5-lookup.md): the earliest snapshot at its gate of W, then P, P+, S, S+, then
    F; a gate without padded records also needs the padded check (a snapshot at its gate without it ends its
    variant, its trainer having stopped there, without a pick), and a pick whose GO check was run and missed ends
    its variant the same way ("A pick that fails the GO check"). ``(None, why)`` while it cannot decide: a variant
    earlier in the order has neither passed nor reached its last step."""
    for variant in ORDER:
        mine = [s for s in snaps if s.variant == variant]
        hit = next((s for s in mine if s.meets_gate), None)
        if hit is not None:
            if hit.padded_ok() and not hit.go_missed():
                why = f"{hit.name}: the earliest snapshot at its gate"
                if variant != "fill":
                    why += f", and at ≥ {PADDED_BAR:.0f}% on the padded check"
                if hit.go_check:
                    return hit, f"{why}; GO check {hit.go_text()}"
                return hit, (f"{why}; its GO check is still to run (ship it, then K = {', '.join(map(str, GO_COUNTS))} "
                             f"into {_shown(GO_CHECK / hit.name)})")
            continue  # stopped at its gate, short of the padded check or the GO check: the variant ends unpicked
        if not any(s.step == LAST_STEP for s in mine):
            last = max((s.step for s in mine), default=0)
            return None, (f"not decided: {variant} has no snapshot at its gate and has not reached step {LAST_STEP} "
                          f"(its last snapshot: step {last}). Fix: train it on (make mini-t5-lookup-study "
                          f"LOOKUP_VARIANTS={variant})")
    return None, (f"NO-GO: no variant of {', '.join(ORDER)} passed its gate, the padded check and the GO check "
                  "within its budget")


VARIANTS = (*(Variant(f"lines K={k}", ("task=lines", "task.format=short", f"task.num_lines={k}"), f"lines-fill-n{k}",
                      GATE, k) for k in MATCHED),
            Variant("lines", ("task=lines", "task.format=short"), "lines", GATE),
            # the other key tasks, at L_tr on the same snapshot, reported whatever they show (no card set: never
            # measured past L_tr by this study)
            Variant("mdqa", ("task=mdqa",), None, GATE), Variant("code key", ("task=code_key",), None, GATE))
DESIGN = Design("mini-t5", L_TR, VARIANTS, "n_lines", "lines held", methods=("none", "log", "pmax", "entropy"))
CARD_SETS = ("lines", *(f"lines-n{k}" for k in (2, 6, 10, 11, 12)), *(f"lines-fill-n{k}" for k in MATCHED),
             "passkey", "topics")


def card_rows(snaps: list[LookupSnapshot]) -> list[str]:
    """The cards at L_tr of the snapshots the rule looked at, with whether each meets its gate."""
    out = ["| snapshot | " + " | ".join(CARD_SETS) + " | at its gate | padded check | GO check |",
           "|" + "---|" * (4 + len(CARD_SETS))]
    for s in snaps:
        check = "F's bar" if s.variant == "fill" else "yes" if s.padded_ok() else "no"
        out.append(f"| {s.name} | " + " | ".join(f"{s.held_out(t):.0f}" for t in CARD_SETS)
                   + f" | {'yes' if s.meets_gate else 'no'} | {check} | {s.go_text()} |")
    return out


def summarize(snap: LookupSnapshot, results: Path, lengths: list[int]) -> dict[str, Any]:
    return {"snapshot": snap.name, "card": {t: snap.held_out(t) for t in CARD_SETS},
            **study_cells.variants_of(DESIGN, snap, results, lengths)}


def study(results: Path, lengths: list[int]) -> tuple[str, dict[str, Any]]:
    every = snapshots()
    picked, why = select(every)
    measured = [summarize(s, results, lengths) for s in every if (results / s.name / "results.csv").is_file()]
    out = ["# mini-t5 lookup stand-in: the lines study, measured (scripts/studies/study_mini_t5_lines.py)", "",
           "Rendered from the records in this directory by `python scripts/studies/study_mini_t5_lines.py "
           "--render-only`; do not edit by hand. Accuracy in % with 95% Wilson intervals; Δ: paired difference to "
           "τ = 1 on the same examples, 95% Newcombe interval (✓ excludes 0 upwards, ✗ downwards); `vs L_tr`: τ = 1's "
           "paired change against L_tr; `lines held`: the lines the records hold. "
           f"τ marked {UNALIGNED_MARK}: Algorithm 1 stopped at an end of its grid without reaching S̄_tr(1) (at 0.50, or "
           "at 1.00 where S̄ at τ = 1 is already past it: at L_tr, the calibration records against the reference's). "
           f"A Δ is a finding only beside its replication at task seed {REPLICATION_SEED}.", "",
           "## Selection", "", f"**{'Picked: ' + why if picked else why}**", "",
           *card_rows([s for s in every if s.meets_gate or s == picked]), ""]
    for s in measured:
        for v in VARIANTS:
            if s["variants"][v.name]:
                title = f"{s['snapshot']}: " + (f"exactly K = {v.count} lines" if v.count else "the benchmark's records"
                                                 if v.task == "lines" else f"{v.name} at L_tr, reported whatever it shows")
                out += study_cells.variant_table(DESIGN, title, s["variants"][v.name], s["not_handled"].get(v.name),
                                                 v.bar)
        for name, cells in s.get("replication", {}).items():
            if cells:
                out += study_cells.variant_table(DESIGN, f"{s['snapshot']}: {name}, replication at task seed "
                                                 f"{REPLICATION_SEED}", cells)
    return "\n".join(out) + "\n", {"picked": picked.name if picked else None, "why": why, "snapshots": measured}


def headline(summaries: list[dict[str, Any]]) -> str:
    """headline.md: every cell past L_tr, the matched counts first, each row followed by its replication."""
    head = ("| snapshot | records | L_ex / L_tr | lines held | τ = 1 | vs L_tr | "
            + " | ".join(f"Δ {study_cells.NAMES[m]} (τ)" for m in HEADLINE_RULES) + " |")
    out = ["<!-- rendered by scripts/studies/study_mini_t5_lines.py from results/mini-t5-lines; do not edit -->",
           f"n = 60 per cell; Δ: paired difference to τ = 1 on the same examples, 95% Newcombe interval (✓/✗: it "
           f"excludes 0); `vs L_tr`: τ = 1's paired change against L_tr; τ in parentheses, {UNALIGNED_MARK} where "
           f"Algorithm 1 stopped at its grid's end short of S̄_tr(1); `↳ seed {REPLICATION_SEED}`: the same cell on 60 "
           "examples the study never used, where a rule's difference excluded 0.", "",
           "**Matched count**: exactly K lines at every length, in filler (counts the snapshot handles at L_tr)", "",
           head, "|" + "---|" * (6 + len(HEADLINE_RULES))]
    for s in summaries:
        for k in MATCHED:
            out += headline_rows(DESIGN, s, f"lines K={k}", f"K = {k}", HEADLINE_RULES)
    out += ["", "**The benchmark's records**: as many lines as the length holds, past the 10-12 of L_tr", "", head,
            "|" + "---|" * (6 + len(HEADLINE_RULES))]
    for s in summaries:
        out += headline_rows(DESIGN, s, "lines", "benchmark", HEADLINE_RULES)
    return "\n".join(out) + "\n"


def render(results: Path, lengths: list[int]) -> str:
    text, data = study(results, lengths)
    results.mkdir(parents=True, exist_ok=True)
    (results / "study.json").write_text(json.dumps(data, indent=1))
    (results / "study.md").write_text(text)
    (results / "headline.md").write_text(headline(data["snapshots"]))
    return text


def ship(target: Path) -> LookupSnapshot:
    """Copy the picked snapshot into ``target`` with its card and a selection section (lengthx.minis.ship)."""
    from lengthx.minis.ship import ship_snapshot

    every = snapshots()
    picked, why = select(every)
    if picked is None:
        raise SystemExit(f"the selection rule cannot pick a lookup stand-in: {why}. Nothing shipped")
    section = ("\n## Selection (docs/mini-t5-lookup.md, the lookup stand-in)\n\n"
               f"Snapshot `{picked.name}` of `results/mini-t5-lookup/snapshots/`, picked by the rule fixed before "
               "training and, for a pick that misses its GO check, the rule added after S+'s step 20,000 missed it "
               f"(docs/mini-t5-lookup.md, \"A pick that fails the GO check\"): {why}. The order is W (warm), P (pieces), P+ (pieces_more), S (scratch), S+ "
               "(scratch_more), then F (fill); the gate: lines ≥ 90% on the L_tr records and at 2, 6, 10, 11 and 12 "
               "lines, passkey ≥ 95%, topics ≥ 90% at every count (F: and lines ≥ 90% on 2, 6 and 11 lines padded "
               f"with filler to L_tr); a gate without padded records also needs ≥ {PADDED_BAR:.0f}% on 2, 11 and 12 "
               f"lines padded to L_tr; a pick whose GO check (≥ {GO_BAR:.0f}% at 2 and 12 lines padded to L_tr, through the mini "
               "profile's mapping, at a task seed no card or check used) missed ends its variant without a pick. "
               "Cards, per count, of the snapshots at their gate and of the pick:\n\n"
               + "\n".join(card_rows([s for s in every if s.meets_gate or s == picked])) + "\n")
    ship_snapshot(picked.path, target, section)
    card = target / "README.md"  # the trainer's card names the first-of-K stand-in's config; this copy has its own
    card.write_text(card.read_text().replace("# mini-t5 — ", "# mini-t5-lookup — ", 1).replace(TRAINED_AS, SHIPPED_AS, 1))
    return picked


def main(argv: list[str] | None = None) -> None:
    p = arguments(__doc__, ROOT / "results" / "mini-t5-lines", DESIGN, worker_spec, only=False)  # the pick only
    p.add_argument("--pick", action="store_true", help="print the snapshot the rule picks, or why not yet, and stop")
    args = p.parse_args(argv)
    results = Path(args.results)
    lengths = sorted({*DEFAULT_LENGTHS, *args.lengths})
    picked, why = select(snapshots())
    if args.pick:
        print(why)
        return
    if args.owed:
        print("\n".join(study_cells.owed(DESIGN, study(results, lengths)[1]["snapshots"])))
        return
    if args.ship:
        print(f"shipped {ship(Path(args.ship)).name} to {args.ship}")
        return
    if not args.render_only:
        if picked is None:
            raise SystemExit(f"study_mini_t5_lines: {why}")
        import torch

        torch.set_num_threads(args.threads)
        if args.pending:
            print(*study_cells.pending(DESIGN, picked, args), sep="\n")
            return
        study_cells.measure(DESIGN, picked, args)
        for spec in args.replicate:
            study_cells.replicate(DESIGN, [picked], spec, args)
    if not args.no_render:
        print(render(results, lengths))


if __name__ == "__main__":
    main()
