"""Figures of paper A from the results directory (PNG and PDF), ``lengthx figures`` (paper B's: figures_paper_b).

- Figure 1: the learned bias b_{m,n} of every encoder head, m fixed at the middle, n over the whole length.
- Figures 2/5: QQ plots of layer 0's average logit vector against N(0, σ²), at L_tr and the longest setting.
- Figures 3, 4, 6-9: temperature against L_ex per task — Prop. 1 and Prop. 2 curves (from measured layer-0
  statistics), Algorithm 1's choices (P_max crosses, entropy dots) and the log_{L} L_tr curve.

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

matplotlib.use("Agg")


# paper A's figure number of each task's temperature analysis
TEMPERATURE_FIGURES = {"lm": 3, "topics": 4, "lines": 6, "passkey": 7, "mdqa": 8, "code_completion": 9}


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


def temperature_figure(df: pd.DataFrame, model: str, task: str, out: Path) -> list[Path]:
    """Figures 3/4/6-9: τ vs L_ex — Prop. 1/2 curves, Algorithm 1 points, log curve."""
    rows = df[(df["model"] == model) & (df["task"] == task)]
    stats = rows[rows["method"] == "stats"].pivot_table(index="setting", columns="metric", values="value")
    lengths = rows[rows["method"] == "stats"].groupby("setting")["L_ex"].first()
    if "L_tr" not in stats.index or len(stats) < 2:
        return []
    l_tr = float(rows["L_tr"].iloc[0])
    tr = stats.loc["L_tr"]
    ext = stats.assign(L=lengths).sort_values("L")  # the L_tr row gives τ = 1 on both curves
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    p1 = [prop1_temperature(l_tr, L, tr["l0_pmax"], tr["l0_sigma"], s) for L, s in zip(ext["L"], ext["l0_sigma"],
                                                                                         strict=True)]
    p2 = [prop2_temperature(l_tr, L, tr["l0_sigma"], s) for L, s in zip(ext["L"], ext["l0_sigma"], strict=True)]
    # the propositions need layer 0's σ at L_ex, so they are drawn at the measured lengths only
    ax.plot(ext["L"], p1, "-", marker=".", color="C0", label=r"Prop. 1 ($P_{\max}$)")
    ax.plot(ext["L"], p2, "-", marker=".", color="C1", label="Prop. 2 (entropy)")
    no_root = [L for L, t in zip(ext["L"], p1, strict=True) if math.isnan(t)]
    if no_root:  # Aτ² − Bτ + C = 0 has no real root: the Gaussian approximation fails there (§5)
        fig.text(0.01, 0.01, "Prop. 1: no real root at L_ex = " + ", ".join(f"{L:.0f}" for L in no_root),
                 fontsize=8, color="C0")
    dense = np.linspace(l_tr, max(ext["L"].max(), l_tr * 1.01), 200)
    ax.plot(dense, [log_temperature(x, l_tr) for x in dense], "--", color="grey", label=r"$\log_{L} L_{tr}$")
    for method, marker, color, label in (("pmax", "x", "C0", r"Algorithm 1, $P_{\max}$"),
                                         ("entropy", "o", "C1", "Algorithm 1, entropy")):
        pts = rows[(rows["method"] == method) & (rows["metric"] == "tau")]
        if not pts.empty:
            ax.scatter(pts["L_ex"], pts["value"], marker=marker, color=color, label=label, zorder=3)
    ax.set_xlabel(r"input length $L_{ex}$ (tokens)")
    ax.set_ylabel(r"temperature $\tau$")
    num = TEMPERATURE_FIGURES.get(task, "")
    ax.set_title(f"Figure {num} ({model}): {task} temperature analysis", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0.04 if no_root else 0, 1, 1))
    return _save(fig, out, f"fig{num}_temperature_{model}_{task}")
