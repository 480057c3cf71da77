"""Figures of paper B from the results directory (PNG and PDF), drawn by ``lengthx figures``.

- Figure 2: out-of-the-box perplexity against evaluation length (multiples of L_t), one curve per model;
  APE models are linearly interpolated to each length (§3.2), RoPE and ALiBi run as they are.
- Figure 3: histogram of the median attention weight of queries past L_t, before (OOTB) and after
  segmented training (§6), from the side files ``task.attention_medians`` writes to ``attention/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lengthx.config import CONF_DIR  # noqa: E402
from lengthx.core.store import read_json  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

matplotlib.use("Agg")


PPL = "segmented_ppl"


def _factor(label: str) -> float | None:
    """``L_t`` → 1, ``2.5L_t`` → 2.5; None for a length given in tokens."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)?L_t", str(label))
    return None if m is None else float(m.group(1) or 1)


def figure2_ootb(df: pd.DataFrame, out: Path, save: Callable[[plt.Figure, Path, str], list[Path]]) -> list[Path]:
    """Figure 2: OOTB perplexity vs length; needs ``ootb`` rows at three or more multiples of L_t."""
    rows = df[(df["task"] == PPL) & (df["method"] == "ootb") & (df["metric"] == "ppl")].copy()
    rows["factor"] = rows["setting"].map(_factor)
    rows = rows.dropna(subset=["factor"])
    curves = {m: g.sort_values("factor") for m, g in rows.groupby("model") if g["factor"].nunique() >= 3}
    if not curves:
        return []
    same: dict[tuple, list[str]] = {}  # models run by the same weights (profile=mini) share one curve
    for model, g in sorted(curves.items()):
        same.setdefault(tuple(zip(g["factor"], g["value"].round(6), strict=True)), []).append(model)
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    for i, (points, models) in enumerate(same.items()):
        xs, ys = zip(*points, strict=True)
        l_t = {m: curves[m]["L_tr"].dropna().iloc[0] if "L_tr" in curves[m] and curves[m]["L_tr"].notna().any()
               else None for m in models}
        ax.plot(xs, ys, marker="o", color=f"C{i}", label=same_run_name(models, l_t))
    ax.set_yscale("log")
    ax.set_xlabel(r"evaluation length ($\times L_t$)")
    ax.set_ylabel("perplexity (mean per sequence, log scale)")
    ax.set_title("Paper B Figure 2: out-of-the-box perplexity vs length", fontsize=10)
    ax.axvline(1, color="grey", lw=0.5, ls=":")
    factors = sorted({f for points in same for f, _ in points})
    if all(float(f).is_integer() for f in factors):  # the tables' column labels: L_t, 2L_t, …
        ax.set_xticks(factors, [f"${int(f) if f != 1 else ''}L_t$" for f in factors])
        ax.set_xlabel("evaluation length")
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)  # below: off the curves
    fig.tight_layout()
    return save(fig, out, "sb_fig2_ootb_perplexity")


def run_name(model: str, l_t: int | None) -> str:
    """How a figure names the model that ran as ``model``: a paper model run by its shipped mini (profile=mini,
    :mod:`lengthx.models.minis`; told by the mini's training length ``l_t``) is the mini, for the paper model:
    ``mini-gpt2 (for GPT-2-XL)``; any other model is itself."""
    from omegaconf import OmegaConf

    path = CONF_DIR / "model" / f"{model}.yaml"
    cfg = OmegaConf.load(path) if path.is_file() else {}
    mini = cfg.get("mini")
    mini_path = CONF_DIR / "model" / f"{mini}.yaml"
    if not mini or not mini_path.is_file() or l_t is None:
        return model
    mini_l_t = OmegaConf.load(mini_path).get("l_tr")
    if int(l_t) != mini_l_t or mini_l_t == cfg.get("l_tr"):
        return model
    return f"{mini} (for {cfg.get('display') or model})"


def same_run_name(models: list[str], l_t: dict[str, float | None]) -> str:
    """The label of models that ran as one checkpoint: ``mini-gpt2 (for GPT-2 = GPT-2-XL)`` when one mini ran
    them all (:func:`run_name`), else their names joined by ``=``."""
    names = [run_name(m, int(l_t[m]) if l_t.get(m) is not None else None) for m in models]
    minis = {n.split(" (for ", 1)[0] for n in names if " (for " in n}
    if len(minis) == 1 and all(" (for " in n for n in names):
        return f"{minis.pop()} (for {' = '.join(n.split(' (for ', 1)[1].removesuffix(')') for n in names)})"
    return " = ".join(names)


FIG3_MODELS = ("gpt2-xl", "pythia-1.4b", "bloom-1b1")  # paper B §5.3: Table 4's models
FIG3_RUNS = "chunk-0.25@"  # … OOTB against chunk-0.25 at each L_e


def _figure3_histograms(attention_dir: Path) -> tuple[dict[str, list[dict]], dict[str, str | None]]:
    """Per model, the histograms Figure 3 compares: the baseline (OOTB, paper B §4.3, else the published
    checkpoint) and the chunk-0.25 runs when there are any (else every trained run); Table 4's models when any
    of them has histograms."""
    by_model: dict[str, list[dict]] = {}
    for p in sorted(attention_dir.glob("*.json")):
        h = read_json(p, required=("model", "method"))  # a damaged side file is named and set aside
        if h is not None:
            by_model.setdefault(h["model"], []).append(h)
    if any(m in by_model for m in FIG3_MODELS):
        by_model = {m: hs for m, hs in by_model.items() if m in FIG3_MODELS}
    baseline = {m: next((b for b in ("ootb", "pretrained") if any(h["method"] == b for h in hs)), None)
                for m, hs in by_model.items()}
    for m, hs in by_model.items():
        if any(h["method"].startswith(FIG3_RUNS) for h in hs):
            by_model[m] = [h for h in hs if h["method"] == baseline[m] or h["method"].startswith(FIG3_RUNS)]
    return by_model, baseline


def figure3_medians(attention_dir: Path, out: Path,
                    save: Callable[[plt.Figure, Path, str], list[Path]]) -> list[Path]:
    """Figure 3: per model, the histogram of log10 median attention past L_t, OOTB vs chunk-0.25."""
    by_model, baseline = _figure3_histograms(attention_dir)
    models = sorted(m for m, hs in by_model.items() if len(hs) >= 2 and baseline[m])
    if not models:
        return []
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 4.3), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        hs = sorted(by_model[model], key=lambda h: (h["method"] != baseline[model], h["method"]))
        for i, h in enumerate(hs):
            edges = np.asarray(h["log10_edges"])
            counts = np.asarray(h["counts"], dtype=float)
            name = {"ootb": "OOTB", "pretrained": "pre-trained"}.get(h["method"], h["method"])
            label = f"{name} (median {h['median']:.1e})"
            ax.stairs(counts / counts.sum(), edges, color=f"C{i}", label=label, lw=1.3)
        ax.axvline(np.log10(hs[0]["uniform_median"]), color="grey", ls=":", lw=1, label="uniform 1/(q+1)")
        ax.set_xlabel(r"$\log_{10}$ median attention weight (queries past $L_t$)")
        ax.set_ylabel("fraction of (layer, head, query)")
        ax.set_title(f"{run_name(model, hs[0].get('l_t'))} at {hs[0]['setting']}", fontsize=9)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)  # below the data
    fig.suptitle("Paper B Figure 3: median attention weight past L_t, before and after training", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "sb_fig3_attention_medians")
