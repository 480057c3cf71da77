"""A one-screen summary of a results directory: what ran, setting × method, with τ (the demo's last table).

The full paper tables (:mod:`lengthx.report.tables.render`) place each number where the paper does; this view
lists only the cells present, one row per model, task and setting, one column per method, each entry the
task's first metric and, where a temperature was applied, its τ.
"""

from __future__ import annotations

import pandas as pd


def _entry(row: pd.Series) -> str:
    tau = row.get("tau")
    shown = f"{row['value']:g}" if isinstance(row["value"], float) else str(row["value"])
    tau_text = f" (τ={float(tau):.2f})" if pd.notna(tau) and str(tau) != "" and float(tau) != 1.0 else ""
    return f"{shown}{tau_text}"


def summary_markdown(df: pd.DataFrame) -> str:
    """Markdown table of the newest ok row per cell (its first metric), settings in the order they ran."""
    ok = df[(df["status"] == "ok") & (df["method"] != "stats")].copy()  # lengthx stats rows are no method
    if ok.empty:
        return "(no finished cell)"
    first_metric = ok.groupby("task", sort=False)["metric"].first()
    ok = ok[ok["metric"] == ok["task"].map(first_metric)].drop_duplicates("cell", keep="last")
    ok["value"] = pd.to_numeric(ok["value"], errors="coerce")
    ok["tau"] = pd.to_numeric(ok["tau"], errors="coerce")
    methods = list(dict.fromkeys(ok["method"]))
    lines = ["| model | task | setting | metric | " + " | ".join(methods) + " |",
             "|---|---|---|---|" + "---|" * len(methods)]
    for (model, task, setting), group in ok.groupby(["model", "task", "setting"], sort=False):
        by_method = {r["method"]: _entry(r) for _, r in group.iterrows()}
        metric = first_metric[task]
        lines.append(f"| {model} | {task} | {setting} | {metric} | "
                     + " | ".join(by_method.get(m, "–") for m in methods) + " |")
    return "\n".join(lines)
