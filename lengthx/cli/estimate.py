"""``lengthx plan … --estimate``: the cost of the planned cells, per experiment (one per paper table) and in total,
on the device whose measured costs :mod:`lengthx.core.estimate` reads (docs/design.md §12)."""

from __future__ import annotations

from typing import Any

from lengthx.core.estimate import KINDS, Costs, Total, cell_estimate, costs_for


def _count(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _hours(total: Total) -> str:
    """The measured hours, and when some passes have no measured cost, the share of passes they price."""
    measured = f"{total.seconds / 3600:.2f}" if total.passes else "0"
    if not total.unmeasured:
        return measured
    every = sum(total.passes.values())
    priced = 1 - sum(total.unmeasured.values()) / every if every else 0.0
    return f"{measured} ({priced:.0%} of passes priced) + unmeasured"


def estimate_totals(jobs: list[tuple[str, Any, list[Any], bool]], costs: Costs) -> dict[str, Total]:
    """The sums of ``jobs`` ((experiment, job config, its cells, whether they are ``stats`` cells)) per experiment
    and over all (``total``); a cell two experiments list counts once, under the first."""
    per: dict[str, Total] = {}
    seen: set[str] = set()
    for experiment, cfg, cells, stats in jobs:
        for cell in cells:
            if cell.key not in seen:
                seen.add(cell.key)
                per.setdefault(experiment, Total()).add(cell_estimate(cfg, cell, stats), costs)
    everything = Total()
    for total in per.values():
        everything.cells += total.cells
        everything.examples += total.examples
        everything.tokens += total.tokens
        everything.unknown_tokens += total.unknown_tokens
        everything.seconds += total.seconds
        for k, v in total.passes.items():
            everything.passes[k] = everything.passes.get(k, 0) + v
        for k, v in total.unmeasured.items():
            everything.unmeasured[k] = everything.unmeasured.get(k, 0) + v
    return {**per, "total": everything}


def estimate_lines(jobs: list[tuple[str, Any, list[Any], bool]], profile: str, costs: Costs | None = None) -> list[str]:
    """The estimate of ``jobs`` (:func:`estimate_totals`): one line per experiment and the total, then where each
    figure comes from and what no measurement covers."""
    costs = costs or costs_for(profile)
    totals = estimate_totals(jobs, costs)
    hours = "GPU-hours" if profile == "paper" else "hours"
    lines = [f"\nestimate on {costs.device} (profile={profile}; measured costs only, unmeasured passes counted "
             "apart):", f"  {'experiment':22s} {'cells':>6s} {'examples':>9s} {'tokens':>8s} {'encoder':>8s} "
             f"{'decoder':>8s} {'stats':>8s} {hours:>40s}"]
    asked = sorted({str(cfg.device) for _, cfg, _, _ in jobs if str(cfg.device) != "auto"})
    other = [d for d in asked if (profile == "paper") != d.startswith("cuda")]
    if other:
        lines.insert(1, f"  note: device={other[0]} was asked, but these are the costs measured on {costs.device}; "
                        "no figure here is that device's")
    for name, total in totals.items():
        tokens = _count(total.tokens) + ("+?" if total.unknown_tokens else "")
        decoder = total.passes.get("decoder_step", 0) + total.passes.get("decoder_pass", 0)
        lines.append(f"  {name:22s} {total.cells:6d} {_count(total.examples):>9s} {tokens:>8s} "
                     f"{_count(total.passes.get('encoder', 0)):>8s} {_count(decoder):>8s} "
                     f"{_count(total.passes.get('stats', 0)):>8s} {_hours(total):>40s}")
    lines.append("  tokens: prompt tokens of the evaluation examples (the task's paper_l_ex where a setting is not "
                 "in tokens; +? = cells of unknown length); decoder: generation steps (at most max_new_tokens) or "
                 "scoring passes; stats: Algorithm 1's reference and search passes, Props 1-2, lengthx stats")
    lines.append("  each pass is costed at the per-token cost measured at the shortest measured length at or above "
                 "its own (errs high); past the longest measured length, or on a shape or kind never measured, "
                 "it is unmeasured")
    for kind, source in sorted(costs.sources.items()):
        lines.append(f"  measured {kind}: {source}")
    for (kind, shape), count in sorted(totals["total"].unmeasured.items()):
        what = KINDS.get(kind.split("/")[0].removeprefix("per-layer "), kind)
        lines.append(f"  unmeasured: {_count(count) if count else 'every held-out'} {what} of {shape} ({kind}): "
                     f"no measured cost on {costs.device}")
    if any(kind == "sequence" for kind, _ in totals["total"].unmeasured):
        lines.append("  unmeasured: paper B's training runs (listed above with each cell that needs them)")
    return lines
