"""Beyond both papers: temperature alignment (paper A and the scaling rules of YaRN, LongRoPE, Qwen's logn and
SSMax, :mod:`lengthx.attention.scaling`) against segmented training (paper B) on the same decoders, by
perplexity at 2L_t…5L_t (``experiment=ext_tau_vs_segmented``).

Rows per model: OOTB (paper B §4.3); OOTB with each τ method (cells ``ootb+<method>``,
:func:`lengthx.core.perplexity.cell_method`); chunk-0.25 trained at L_e = 4L_t (paper B's Table 4 method,
``chunk-0.25@4L_t``); and chunk-0.25 with the τ rule that gave OOTB its lowest mean perplexity over the columns,
a row derived by :func:`with_best_rule` (the rule is chosen on OOTB, never on the chunk-0.25 numbers it shows).
"""

from __future__ import annotations

import pandas as pd

from lengthx.report.tables.spec import TableSpec, cols

PPL = "segmented_ppl"
SETTINGS = ["2L_t", "3L_t", "4L_t", "5L_t"]
TAU_RULES = ("log", "yarn", "longrope", "logn", "ssmax", "pmax", "entropy")  # in the order of the rows
CHUNK = "chunk-0.25@4L_t"  # chunk-0.25 trained at L_e = 4L_t (task.run=chunk-0.25-4x)
BEST = f"{CHUNK}+best"
MODELS = ("gpt2", "pythia-160m", "bloom-1b1")

_RULE_LABELS = {"log": r"$\log_{L_{ex}} L_{tr}$", "yarn": "YaRN", "longrope": "LongRoPE (= log)", "logn": "logn (Qwen)",
                "ssmax": "SSMax", "pmax": r"$P_{\max}$ (Alg. 1)", "entropy": "$H$ (Alg. 1)"}
LABELS = {**{f"ootb+{r}": f"OOTB + {label}" for r, label in _RULE_LABELS.items()},
          CHUNK: "chunk-0.25 (trained at $4L_t$)", BEST: "chunk-0.25 ($4L_t$) + best rule on OOTB"}
METHODS = ("ootb", *(f"ootb+{r}" for r in TAU_RULES), CHUNK, BEST)


def best_rules(ok: pd.DataFrame) -> dict[str, tuple[list[str], float]]:
    """Per model, the τ methods with the lowest mean OOTB perplexity over :data:`SETTINGS` (ties: all of
    them, e.g. log and LongRoPE, which are the same τ) and that mean; only methods with every column count."""
    rows = ok[(ok["task"] == PPL) & (ok["metric"] == "ppl") & ok["setting"].isin(SETTINGS)
              & ok["method"].isin([f"ootb+{rule}" for rule in TAU_RULES])]
    # one pass over a lab's store: per (model, method) the settings it has and their mean
    stats = rows.assign(value=pd.to_numeric(rows["value"], errors="coerce")).groupby(["model", "method"]).agg(
        settings=("setting", "nunique"), mean=("value", "mean"))
    complete = stats[stats["settings"] == len(SETTINGS)]
    by_model: dict[str, dict[str, float]] = {}
    for (model, method), mean in zip(complete.index.tolist(), complete["mean"].tolist(), strict=True):
        by_model.setdefault(str(model), {})[method.removeprefix("ootb+")] = float(mean)
    out: dict[str, tuple[list[str], float]] = {}
    for model in sorted(by_model):
        means = {rule: by_model[model][rule] for rule in TAU_RULES if rule in by_model[model]}  # in TAU_RULES' order
        if means:
            low = min(means.values())
            out[str(model)] = ([r for r, v in means.items() if abs(v - low) <= 1e-9 * max(1.0, low)], low)
    return out


def with_best_rule(ok: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``ok`` plus the rows of :data:`BEST` (copies of ``chunk-0.25@4L_t+<best rule>``), and one note per model
    naming its rule."""
    extra, notes = [], []
    chunks = ok[ok["method"].str.startswith(f"{CHUNK}+")]  # the candidates, once (a lab's store is large)
    for model, (rules, mean) in best_rules(ok).items():
        extra.append(chunks[(chunks["model"] == model) & (chunks["method"] == f"{CHUNK}+{rules[0]}")].assign(method=BEST))
        notes.append(f"{model}: {' = '.join(rules)} (mean OOTB perplexity {mean:.3f} over {SETTINGS[0]}–{SETTINGS[-1]})")
    return pd.concat([ok, *extra], ignore_index=True), notes


TAU_VS_SEGMENTED = TableSpec(
    "ext_tau_vs_segmented",
    "Beyond both papers: temperature vs segmented training (perplexity, lower is better)",
    cols("Perplexity", PPL, SETTINGS, "ppl"), methods=METHODS, avg=True, digits=3, extra_methods=False,
    models=MODELS, lower_is_better=True, bold=(*SETTINGS, "Avg."), labels=tuple(LABELS.items()), derive=with_best_rule,
    derive_title="best τ rule per model, chosen on OOTB (lowest mean perplexity)",
    intervals=True, paired_with="ootb",
)

EXTENSION_SPECS: list[TableSpec] = [TAU_VS_SEGMENTED]
