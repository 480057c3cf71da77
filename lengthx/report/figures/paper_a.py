"""Figures of paper A from the results directory (PNG and PDF), ``lengthx figures`` (paper B's: figures_paper_b).

- Figure 1: the learned bias b_{m,n} of every encoder head, m fixed at the middle, n over the whole length.
- Figures 2/5: QQ plots of layer 0's average logit vector against N(0, σ²), at L_tr and the longest setting.
- Figures 3, 4, 6-9: temperature against L_ex per task — Algorithm 1's choices (P_max crosses, entropy dots), the
  log_{L} L_tr curve and Prop. 1 and Prop. 2, drawn from the same cells as the task's temperature table (Tables
  8-11; :mod:`lengthx.report.figures.consistency` checks that they agree).

Inputs: the ``stats`` rows and side files written by ``lengthx stats`` and the ``tau`` rows of runs.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lengthx.alignment.propositions import log_temperature, prop1_temperature, prop2_temperature  # noqa: E402
from lengthx.core.store import make_dirs, write_atomic  # noqa: E402
from lengthx.report.tables.render import latest_ok  # noqa: E402

matplotlib.use("Agg")


# paper A's figure number of each task's temperature analysis, and the table of the same temperatures
TEMPERATURE_FIGURES = {"lm": 3, "topics": 4, "lines": 6, "passkey": 7, "mdqa": 8, "code_completion": 9}
TEMPERATURE_TABLES = {"lm": "aa_table8", "topics": "aa_table9", "lines": "aa_table9", "passkey": "aa_table9",
                      "mdqa": "aa_table10", "code_completion": "aa_table11"}
# the methods whose cells a temperature figure draws (Algorithm 1, the log rule, Propositions 1-2)
DRAWN_METHODS = ("pmax", "entropy", "log", "prop1", "prop2")


# file metadata that changes on every save (matplotlib stamps PDFs with the time of writing): left out, so an
# unchanged figure is written byte for byte as before and `lengthx figures` leaves committed files alone
FIXED_METADATA = {"png": {}, "pdf": {"CreationDate": None, "ModDate": None}}


def _save(fig: plt.Figure, out: Path, name: str) -> list[Path]:
    """Write ``fig`` as ``<name>.png`` and ``<name>.pdf`` under ``out``, deterministically (:data:`FIXED_METADATA`),
    each rendered in memory and then written beside its file and renamed (an interrupted write never leaves half
    a figure in place of the previous one)."""
    make_dirs(out)
    paths = [out / f"{name}.{fmt}" for fmt in FIXED_METADATA]
    for p in paths:
        buf = io.BytesIO()
        fig.savefig(buf, format=p.suffix[1:], dpi=150, bbox_inches="tight", metadata=FIXED_METADATA[p.suffix[1:]])
        write_atomic(p, buf.getvalue())
    plt.close(fig)
    return paths


def figure1_bias(side: dict, model: str, out: Path) -> list[Path]:
    """Figure 1: b_{m,n} per head (m = L/2), one panel per head."""
    bias = np.asarray(side["bias"])
    heads, length = bias.shape
    cols = min(4, heads)
    rows = math.ceil(heads / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False, sharex=True)
    n = np.arange(length)
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= heads:
            ax.axis("off")
            continue
        ax.plot(n, bias[h], lw=1)
        ax.axvline(length // 2, color="grey", lw=0.5, ls=":")
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xlabel("key position n")
        ax.set_ylabel(r"$b_{m,n}$")
    fig.suptitle(f"Figure 1 ({model}): learned T5 relative bias, m = {length // 2}")
    fig.tight_layout()
    return _save(fig, out, f"fig1_bias_{model}")


def figure2_qq(side: dict, model: str, task: str, out: Path) -> list[Path]:
    """Figures 2/5: QQ of layer 0's average logit vector at L_tr and the longest setting."""
    qq = side.get("qq", {})
    if "L_tr" not in qq or len(qq) < 2:
        return []
    longest = max((k for k in qq if k != "L_tr"), key=lambda k: qq[k]["L_ex"])
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    for ax, label in zip(axes, ["L_tr", longest], strict=True):
        th, sa = np.asarray(qq[label]["theoretical"]), np.asarray(qq[label]["sample"])
        ax.scatter(th, sa, s=6, label="average logit vector")
        lim = [min(th.min(), sa.min()), max(th.max(), sa.max())]
        ax.plot(lim, lim, color="k", lw=0.8, label="y = x")
        ax.set_xlabel(r"quantiles of $N(0, \sigma^2)$")
        ax.set_ylabel("sample quantiles")
        ax.set_title(f"{task}, {label} (L ≈ {qq[label]['L_ex']:.0f})", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"Figure 2/5 ({model}): QQ plot of layer 0's average logit vector")
    fig.tight_layout()
    return _save(fig, out, f"fig2_qq_{model}_{task}")


def temperature_series(df: pd.DataFrame, model: str, task: str) -> dict[str, pd.DataFrame]:
    """The τ the temperature figure of ``model`` on ``task`` draws per method of :data:`DRAWN_METHODS`: the newest
    ``ok`` ``tau`` row of each cell, the rows its table shows (Tables 8-11), as (setting, L_ex, value) by length."""
    ok = latest_ok(df)
    if ok.empty:
        return {}
    rows = ok[(ok["model"] == model) & (ok["task"] == task) & (ok["metric"] == "tau")
              & ok["method"].isin(DRAWN_METHODS)]
    return {str(m): g.sort_values("L_ex")[["setting", "L_ex", "value"]].reset_index(drop=True)
            for m, g in rows.groupby("method")}


def _statistics_curve(rows: pd.DataFrame, method: str) -> pd.DataFrame:
    """Prop. 1 or 2 from the ``stats`` rows (layer 0 at τ = 1, ``lengthx stats``) at each measured length, for a
    figure whose table has no row of the method."""
    stats = rows[rows["method"] == "stats"].pivot_table(index="setting", columns="metric", values="value")
    lengths = rows[rows["method"] == "stats"].groupby("setting")["L_ex"].first()
    if "L_tr" not in stats.index or len(stats) < 2:
        return pd.DataFrame(columns=["setting", "L_ex", "value"])
    l_tr, tr = float(rows["L_tr"].iloc[0]), stats.loc["L_tr"]
    ext = stats.assign(L=lengths).sort_values("L")  # the L_tr row gives τ = 1 on both curves
    if method == "prop1":
        tau = [prop1_temperature(l_tr, L, tr["l0_pmax"], tr["l0_sigma"], s) for L, s in zip(ext["L"], ext["l0_sigma"],
                                                                                          strict=True)]
    else:
        tau = [prop2_temperature(l_tr, L, tr["l0_sigma"], s) for L, s in zip(ext["L"], ext["l0_sigma"], strict=True)]
    return pd.DataFrame({"setting": list(ext.index), "L_ex": list(ext["L"]), "value": tau})


def _joined(names: list[str]) -> str:
    """Settings of one tick as one label: ``30docs@0,14,29`` for ``30docs@0``, ``30docs@14``, ``30docs@29``."""
    heads = {n.partition("@")[0] for n in names}
    if len(names) > 1 and len(heads) == 1 and all("@" in n for n in names):
        return f"{heads.pop()}@" + ",".join(n.partition("@")[2] for n in names)
    return ", ".join(names)


def table_axis(ax: plt.Axes, series: dict[str, pd.DataFrame], what: str) -> None:
    """A second x-axis on top of ``ax`` in the units of the matching table: each cell's setting as its table
    labels the column (a mini runs the paper's setting at its own length, so Table 8's 15000 is L_ex ≈ 3750),
    above the L_ex the cell read."""
    cells = pd.concat([s[["setting", "L_ex"]] for s in series.values()]) if series else pd.DataFrame()
    if cells.empty:
        return
    cells = cells[cells["setting"] != "L_tr"].groupby("setting", sort=False)["L_ex"].median().sort_values()
    ticks: dict[int, list[str]] = {}  # settings read at one length (MDQA's gold positions) share one tick
    for setting, l_ex in cells.items():
        ticks.setdefault(round(l_ex), []).append(str(setting))
    top = ax.secondary_xaxis("top")
    top.set_xticks([float(cells[names[0]]) for names in ticks.values()], [_joined(n) for n in ticks.values()],
                   fontsize=7)
    top.set_xlabel(f"{what} (the paper's setting)", fontsize=8)


def temperature_figure(df: pd.DataFrame, model: str, task: str, out: Path) -> list[Path]:
    """Figures 3/4/6-9: τ vs L_ex. Algorithm 1's choices, the log rule's and Props. 1-2's τ are the cells of the
    task's temperature table (:func:`temperature_series`, so figure and table agree); a proposition without cells
    is drawn from layer 0's τ = 1 statistics and says so, and one without a real root anywhere has no line, only
    the footnote."""
    rows = df[(df["model"] == model) & (df["task"] == task)]
    series = temperature_series(df, model, task)
    if not series and rows[rows["method"] == "stats"]["setting"].nunique() < 2:
        return []
    l_tr = float(rows["L_tr"].iloc[0])
    fig, ax = plt.subplots(figsize=(7.4, 4.0))
    notes = []
    for method, color, label in (("prop1", "C0", r"Prop. 1 ($P_{\max}$)"), ("prop2", "C1", "Prop. 2 (entropy)")):
        curve = series.get(method)
        if curve is None:
            curve, label = _statistics_curve(rows, method), label + ", from τ = 1 statistics"
        finite = curve[curve["value"].notna()]
        if (finite["setting"] != "L_tr").any():  # the L_tr anchor (τ = 1) alone draws no line
            ax.plot(finite["L_ex"], finite["value"], "-", marker=".", color=color, label=label)
        lost = [L for L, t in zip(curve["L_ex"], curve["value"], strict=True) if math.isnan(t)]
        if lost:  # Prop. 1's Aτ² − Bτ + C = 0 has no real root: the Gaussian approximation fails there (§5)
            notes.append(f"{label.split(' (')[0]}: no real root at L_ex = " + ", ".join(f"{L:.0f}" for L in lost))
    longest = max([float(g["L_ex"].max()) for g in series.values()] + [float(rows["L_ex"].max()), l_tr * 1.01])
    dense = np.linspace(l_tr, longest, 200)
    ax.plot(dense, [log_temperature(x, l_tr) for x in dense], "--", color="grey", label=r"$\log_{L} L_{tr}$")
    if "log" in series:
        ax.scatter(series["log"]["L_ex"], series["log"]["value"], marker="|", color="grey", zorder=3)
    for method, marker, color, label in (("pmax", "x", "C0", r"Algorithm 1, $P_{\max}$"),
                                         ("entropy", "o", "C1", "Algorithm 1, entropy")):
        if method in series:
            ax.scatter(series[method]["L_ex"], series[method]["value"], marker=marker, color=color, label=label,
                       zorder=3)
    ax.set_xlabel(r"input length $L_{ex}$ (tokens this model reads)")
    ax.set_ylabel(r"temperature $\tau$")
    num = TEMPERATURE_FIGURES.get(task, "")
    table = TEMPERATURE_TABLES.get(task)
    table_axis(ax, series, f"Table {table.removeprefix('aa_table')}'s column" if table else "setting")
    ax.set_title(f"Figure {num} ({model}): {task} temperature analysis", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)  # beside the data
    from_cells = "points and Prop. lines" if {"prop1", "prop2"} & set(series) else "points"
    notes.append(f"{from_cells}: the τ of Table {table.removeprefix('aa_table')}'s cells" if table else "")
    fig.text(0.01, 0.01, "; ".join(n for n in notes if n), fontsize=7, color="dimgrey")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return _save(fig, out, f"fig{num}_temperature_{model}_{task}")
