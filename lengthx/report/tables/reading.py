"""One line per setting that says what a temperature did there, with intervals (the demo's last lines).

For every setting where τ = 1 (method ``none``) and another method scored the same examples, a reading such as

    mini-t5 passkey 7432tokens (29× L_tr, n = 20): τ = 1 55% [34, 74] (100% [84, 100] at L_tr), pmax 85% [64, 95]
    (τ = 0.50), Δ +30 [+5, +51]

gives each cell's value with its 95% interval (Wilson for right-or-wrong scores, else the bootstrap), the
paired difference to τ = 1 (Newcombe / bootstrap, :mod:`lengthx.report.tables.intervals`) and, where the same
run holds the model's training length as a setting, τ = 1's value there.
"""

from __future__ import annotations

import pandas as pd

from lengthx.core.frames import finite_number, rows
from lengthx.core.store import UNALIGNED_MARK, ResultsStore
from lengthx.report.tables.intervals import table_intervals
from lengthx.report.tables.render import latest_ok, unaligned


def _value(value: float, low: float, high: float, right_or_wrong: bool) -> str:
    """``55% [34, 74]`` for accuracies, ``19.5 [15.6, 23.8]`` otherwise."""
    if right_or_wrong:
        return f"{value:.0f}% [{low:.0f}, {high:.0f}]"
    return f"{value:.3g} [{low:.3g}, {high:.3g}]"


def readings(store: ResultsStore, df: pd.DataFrame, baseline: str = "none") -> list[str]:
    """The reading of every (model, task, setting) with a baseline cell and another method's paired cell, in
    the order the settings ran; the task's first metric only."""
    ok = latest_ok(df)
    if ok.empty:
        return []
    ok = ok[ok["method"] != "stats"]
    first_metric = ok.groupby("task", sort=False)["metric"].first()
    ok = ok[ok["metric"] == ok["task"].map(first_metric)]
    intervals = table_intervals(store, _readable(ok, baseline), set(ok["task"]), set(ok["metric"]), baseline)
    # only the settings whose baseline has an interval can be read: the rest of a lab's store is never scanned
    keys = {(m, t, s) for (m, me, t, s, _) in intervals if me == baseline}
    ok = ok[[k in keys for k in zip(ok["model"].tolist(), ok["task"].tolist(), ok["setting"].astype(str).tolist(),
                                    strict=True)]]
    bases: dict[tuple[str, str, str], list] = {}  # the baseline's rows by (model, task, metric), for its L_tr
    groups: dict[tuple[str, str, str], list] = {}  # every row by (model, task, setting), in the order they ran
    for r in rows(ok):
        groups.setdefault((r.model, r.task, r.setting), []).append(r)
        if r.method == baseline:
            bases.setdefault((r.model, r.task, r.metric), []).append(r)
    lines = []
    for (model, task, setting), group in groups.items():
        metric = first_metric[task]
        base = intervals.get((model, baseline, task, str(setting), metric))
        base_rows = [r for r in group if r.method == baseline]
        others = [r for r in group if r.method != baseline
                  and (c := intervals.get((model, r.method, task, str(setting), metric))) is not None
                  and c.delta is not None]
        if base is None or not base_rows or not others:
            continue
        b = base_rows[0]
        score = base.kind == "score"
        l_tr = finite_number(b.L_tr)
        ratio = f"{ratio_text(float(b.L_ex) / l_tr)}× L_tr, " if l_tr else ""
        held = _held(store, str(b.cell))
        text = (f"{model} {task} {setting} ({ratio}{held + ', ' if held else ''}n = {base.n}): τ = 1 "
                f"{_value(float(b.value), base.low, base.high, score)}")
        at_l_tr = _at_training_length(bases.get((model, task, metric), []), intervals, l_tr, baseline, _count(setting))
        if at_l_tr and str(setting) != at_l_tr[0]:
            held_there = _held(store, at_l_tr[4])  # so a reader sees whether L_tr held the same count
            text += f" ({_value(*at_l_tr[1:4], score)} at L_tr{', ' + held_there if held_there else ''})"
        for r in others:
            c = intervals[(model, r.method, task, str(setting), metric)]
            tau = finite_number(r.tau)
            tau_text = f" (τ = {tau:.2f}{UNALIGNED_MARK}, the grid's end, short of S̄_tr(1))" if tau is not None \
                and unaligned(r) else (f" (τ = {tau:.2f})" if tau is not None else "")
            text += (f", {r.method} {_value(float(r.value), c.low, c.high, score)}{tau_text}, "
                     + (f"Δ {c.delta:+.0f} [{c.delta_low:+.0f}, {c.delta_high:+.0f}]" if score else
                        f"Δ {c.delta:+.3g} [{c.delta_low:+.3g}, {c.delta_high:+.3g}]"))
        lines.append(text)
    return lines


def ratio_text(ratio: float) -> str:
    """L_ex / L_tr as a reading prints it: whole from 10x or within 0.05 of a whole number, else one decimal
    (0.5×, 2.5×, 4×, 29×; never 0× for half the training length)."""
    return f"{ratio:.0f}" if ratio >= 10 or abs(ratio - round(ratio)) < 0.05 else f"{ratio:.1f}"


def _readable(ok: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The rows a reading can show, whose intervals are drawn (only these records are read): every row of a
    (model, task, setting) that has the baseline and another method, and the baseline's rows of the same model
    and task (its value at L_tr)."""
    group = [ok[c] for c in ("model", "task", "setting")]
    is_base = ok["method"] == baseline
    bases = is_base.groupby(group, sort=False, dropna=False).transform("sum")
    methods = is_base.groupby(group, sort=False, dropna=False).transform("size")
    read = (bases > 0) & (methods > bases)
    pairs = set(zip(ok.loc[read, "model"].tolist(), ok.loc[read, "task"].tolist(), strict=True))
    of_pair = pd.Series([(m, t) in pairs for m, t in zip(ok["model"].tolist(), ok["task"].tolist(), strict=True)],
                        index=ok.index)
    return ok[read | (is_base & of_pair)]


def _count(setting: object) -> str:
    """What a setting label fixes beside its length: ``-3topics`` of ``1024tokens-3topics`` (task.num_topics)."""
    label = str(setting)
    return label.split("tokens", 1)[1] if "tokens" in label else ""


def _held(store: ResultsStore, cell: str) -> str:
    """How many conversations a topics cell's records hold (``3 topics``, ``10-15 topics``), from the records'
    ``meta``; ``""`` for other tasks."""
    counts = sorted({int(r["meta"]["n_topics"]) for r in store.load_records(cell).values()
                     if isinstance(r.get("meta"), dict) and isinstance(r["meta"].get("n_topics"), int)})
    if not counts:
        return ""
    return f"{counts[0]} topics" if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]} topics"


def _at_training_length(rows: list, intervals: dict, l_tr: float | None, baseline: str,
                        count: str = "") -> tuple[str, float, float, float, str] | None:
    """(setting, value, low, high, cell) of the baseline cell among ``rows`` (one model, task and metric) whose
    requested length is the model's L_tr, at the same fixed count of conversations as the setting read
    (``count``: :func:`_count`), if any."""
    if l_tr is None:
        return None
    for r in rows:
        if finite_number(r.L_req) == l_tr and _count(r.setting) == count:
            c = intervals.get((r.model, baseline, r.task, str(r.setting), r.metric))
            if c is not None:
                return str(r.setting), float(r.value), c.low, c.high, str(r.cell)
    return None
