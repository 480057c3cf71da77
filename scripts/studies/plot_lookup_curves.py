"""The lookup study's curves (docs/mini-t5-lookup.md): every variant's training curve, drawn
from its ``curve.json`` (a row every 100 steps), as a figure and a table of numbers.

Left panel: teacher-forced exact match of single-question lines records by the lines they keep (1, 2, …: the
curriculum's counts so far), the curriculum's stage changes marked (with the record form, for a variant that
trains several: its rows are of the form it was training). Right panel: greedy exact match on the 16
held-out records of each card set, every 500 steps (lines of exactly 2, 6 and 12, passkey, topics). The table
gives each variant's 2-line teacher-forced EM by 1,000-step block and record form (:func:`block_means`) and lists,
every 500 steps, the stage, the teacher-forced EM by lines kept (single-question and multi-query) and the
held-out greedy EM, with each variant's steps and thread-hours and where it stands against the study's budget
(:func:`budget`).

    .venv/bin/python scripts/studies/plot_lookup_curves.py           # results/mini-t5-lookup/curves.{png,md}
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HELD = ("lines-n2", "lines-n6", "lines-n12", "lines-fill-n2", "passkey", "topics")  # lines-fill: F only
# what changed under a variant mid-run (docs/mini-t5-lookup.md: "A lost state…", the variants' fixes), marked on
# the figure so that a dip there is not read as the model's
EVENTS = {"warm": ((4_000, "resumed from resume.pt"),),
          "pieces": ((6_136, "one-piece words fixed"), (11_705, "resumed from resume.pt")),
          "scratch": ((1_605, "resumed from resume.pt"), (19_538, "resumed from resume.pt")),
          "pieces_more": ((10_355, "resumed from resume.pt"), (14_525, "on a GPU from resume.pt"),
                          (16_332, "on a GPU from resume.pt"), (19_593, "back on the CPU from resume.pt")),
          "scratch_more": ((4_700, "on a GPU from resume.pt"), (6_918, "back on the CPU from resume.pt"),
                           (16_620, "resumed from resume.pt")),
          "fill": ((8_706, "resumed from resume.pt"),)}


def read(train_dir: Path) -> dict[str, list[dict]]:
    """Each variant's curve rows (``<train_dir>/<variant>/curve.json``), variants with a curve only."""
    out = {}
    for path in sorted(train_dir.glob("*/curve.json")):
        rows = json.loads(path.read_text())
        if rows:
            out[path.parent.name] = sorted(rows, key=lambda r: r["step"])
    return out


def stage(row: dict) -> str:
    """The row's curriculum stage, with its record form where the variant trains several (variant P)."""
    return f"{row['form']} {row['stage']}" if "form" in row else str(row["stage"])


def draw(curves: dict[str, list[dict]], out: Path) -> None:
    """Both panels, one row of panels per variant."""
    fig, axes = plt.subplots(len(curves), 2, figsize=(11, 3.4 * len(curves)), squeeze=False)
    for (name, rows), (left, right) in zip(curves.items(), axes, strict=True):
        steps = [r["step"] for r in rows]
        counts = sorted({int(k) for r in rows for k in r.get("em_by_lines", {})})
        for i, k in enumerate(counts):
            pts = [(r["step"], r["em_by_lines"][str(k)]) for r in rows if str(k) in r.get("em_by_lines", {})]
            left.plot(*zip(*pts, strict=True), color=f"C{i}", lw=1.2, label=f"{k} line{'s' * (k > 1)}")
        for prev, row in zip(rows, rows[1:], strict=False):
            if stage(row) != stage(prev):
                left.axvline(row["step"], color="0.6", ls=":", lw=0.8)
                left.text(row["step"], 1.02, f"stage {stage(row)}", fontsize=7, ha="center")
        for step, what in EVENTS.get(name, ()):
            if step <= steps[-1]:
                left.axvline(step, color="C3", ls="--", lw=0.8)
                left.text(step, 0.03, f" {what}", fontsize=7, color="C3", rotation=90, va="bottom")
        left.set_ylim(0, 1.08)
        left.set_xlim(0, max(steps) * 1.02)
        left.set_xlabel("step")
        left.set_ylabel("teacher-forced EM (single question)")
        left.set_title(f"{name}: {steps[-1]:,} steps, {rows[-1]['minutes'] / 60:.1f} thread-hours", fontsize=9)
        left.legend(fontsize=7, loc="center right")
        held = [r for r in rows if r.get("held_out")]
        for i, key in enumerate(HELD):
            pts = [(r["step"], r["held_out"][key]) for r in held if key in r["held_out"]]
            if pts:
                right.plot(*zip(*pts, strict=True), marker=".", color=f"C{i}", lw=1, label=key)
        right.axhline(90, color="0.6", ls="--", lw=0.8)
        right.set_ylim(-3, 103)
        right.set_xlim(0, max(steps) * 1.02)
        right.set_xlabel("step")
        right.set_ylabel("held-out greedy EM (%, 16 records)")
        if held:
            right.legend(fontsize=7, loc="center right")
    fig.suptitle("The lookup stand-in's training curves at L_tr = 256 (the gate: lines ≥ 90% at every count)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


BUDGET_STEPS, FLAT_AFTER, FLAT_WINDOW, FLAT_BLOCK, FLAT_BAND = 20_000, 10_000, 5_000, 1_000, 0.05


def two_line_mean(rows: list[dict], lo: int, hi: int, form: str, key: str = "em_by_lines") -> float | None:
    """The mean 2-line teacher-forced EM (``key``: single-question or multi-query) of the rows of ``form`` at steps
    in (``lo``, ``hi``]; None where none has 2-line records."""
    vals = [r[key]["2"] for r in rows if lo < r["step"] <= hi and r.get("form", "benchmark") == form
            and "2" in r.get(key, {})]
    return sum(vals) / len(vals) if vals else None


def block_means(rows: list[dict]) -> list[str]:
    """A table of the 2-line teacher-forced EM by 1,000-step block and record form, single-question and
    multi-query: the plateau's numbers, one row per block (the last block ends at the last step)."""
    out = ["| steps | form | 2 lines, single question | 2 lines, multi-query |", "|---|---|---|---|"]
    last = rows[-1]["step"]
    forms = list(dict.fromkeys(r.get("form", "benchmark") for r in rows))
    for lo in range(0, last, FLAT_BLOCK):
        hi = min(lo + FLAT_BLOCK, last)
        for form in forms:
            single = two_line_mean(rows, lo, hi, form)
            if single is not None:
                multi = two_line_mean(rows, lo, hi, form, "em_multi_by_lines")
                out.append(f"| {lo:,}-{hi:,} | {form} | {single:.2f} | {'' if multi is None else f'{multi:.2f}'} |")
    return out


def budget(rows: list[dict]) -> str:
    """Where a variant stands against the study's budget (docs/mini-t5-lookup.md, "Budget"): past 20,000 steps, or
    past 10,000 and flat over its last 5,000, flat meaning the benchmark form's single-question 2-line
    teacher-forced EM, by 1,000-step means over those steps, every mean within ±0.05 of theirs (a step not of the
    benchmark's form, or without 2-line records, leaves its block without a mean and the rule unmet)."""
    last = rows[-1]["step"]
    if last >= BUDGET_STEPS:
        return f"met: {last:,} steps, past the budget's {BUDGET_STEPS:,}"
    if last <= FLAT_AFTER:
        return f"not met: {last:,} steps, neither past {BUDGET_STEPS:,} nor past {FLAT_AFTER:,}"
    means = [two_line_mean(rows, lo, lo + FLAT_BLOCK, "benchmark") for lo in range(last - FLAT_WINDOW, last, FLAT_BLOCK)]
    shown = ", ".join("none" if m is None else f"{m:.2f}" for m in means)
    where = f"the benchmark form's 2-line teacher-forced EM by 1,000 steps over steps {last - FLAT_WINDOW:,}-{last:,}: "
    if None in means:
        return f"not met: {where}{shown} (a block without such records); it trains on to {BUDGET_STEPS:,}"
    centre = sum(means) / len(means)
    if max(abs(m - centre) for m in means) <= FLAT_BAND:
        return f"met: past {FLAT_AFTER:,} and flat, {where}{shown}, each within ±{FLAT_BAND} of their mean {centre:.2f}"
    return f"not met: past {FLAT_AFTER:,} but not flat, {where}{shown} (±{FLAT_BAND} of their mean {centre:.2f})"


def stage_starts(rows: list[dict]) -> str:
    """Where each curriculum stage begins: the first curve row (every 100 steps) in it, so a stage passed at step
    s shows by the next row's step."""
    starts = [(stage(r), r["step"]) for i, r in enumerate(rows) if i == 0 or stage(r) != stage(rows[i - 1])]
    return ", ".join(f"{name} from {'the first row' if i == 0 else f'step {step:,}'}"
                     for i, (name, step) in enumerate(starts))


def table(curves: dict[str, list[dict]]) -> str:
    """The numbers every 500 steps, one section per variant."""
    parts = ["# The lookup study's curves\n",
             "Written by `scripts/studies/plot_lookup_curves.py` from `results/mini-t5-lookup/train/<variant>/"
             "curve.json`; the figure is `curves.png`. Teacher-forced EM is over the 100 steps before the row "
             "(single-question / multi-query records by the lines they keep); held-out greedy EM is on 16 "
             "records per set at L_tr.\n"]
    for name, rows in curves.items():
        last = rows[-1]
        parts.append(f"\n## {name}: {last['step']:,} steps, {last['minutes'] / 60:.1f} thread-hours, stage "
                     f"{stage(last)}\n")
        parts.append(f"Budget: {budget(rows)}.\n")
        parts.append(f"Stages (by the curve's rows): {stage_starts(rows)}.\n")
        parts.append("Two lines, teacher-forced EM by 1,000 steps:\n")
        parts.append("\n".join(block_means(rows)) + "\n")
        parts.append("Every 500 steps:\n")
        parts.append("| step | stage | TF EM by lines (single) | TF EM by lines (multi) | "
                     + " | ".join(HELD) + " |")
        parts.append("|---|---|---|---|" + "---|" * len(HELD))
        for r in rows:
            if r["step"] % 500 and r is not last:
                continue
            single = ", ".join(f"{k}: {v:.2f}" for k, v in r.get("em_by_lines", {}).items())
            multi = ", ".join(f"{k}: {v:.2f}" for k, v in r.get("em_multi_by_lines", {}).items())
            held = [f"{r['held_out'][k]:.0f}" if k in r.get("held_out", {}) else "" for k in HELD]
            parts.append(f"| {r['step']} | {stage(r)} | {single} | {multi} | " + " | ".join(held) + " |")
    return "\n".join(parts) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-dir", type=Path, default=Path("results/mini-t5-lookup/train"))
    p.add_argument("--out-dir", type=Path, default=Path("results/mini-t5-lookup"))
    args = p.parse_args()
    curves = read(args.train_dir)
    if not curves:
        raise SystemExit(f"no curve.json under {args.train_dir}/<variant>/: train a variant first "
                         "(make mini-t5-lookup-study)")
    draw(curves, args.out_dir / "curves.png")
    (args.out_dir / "curves.md").write_text(table(curves))
    print(f"wrote {args.out_dir / 'curves.png'} and {args.out_dir / 'curves.md'}")


if __name__ == "__main__":
    main()
