"""The papers' descriptive tables of models, rendered from the model configs (``conf/model/*.yaml``):

- paper A, Table 2: open-source language models and their positional embeddings (one column per model family);
- paper B, Table 1: key model characteristics (# of parameters, PE, L_t) of the models it extends.

They hold no results; ``lengthx tables`` writes them every time. ``--compare-paper`` sets the published
entry beside ours, matched by family (Table 2) or by the model's ``paper_b_role`` (paper B, Table 1).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from lengthx.config import CONF_DIR

# model family → (our column header, the column of paper A's Table 2 it corresponds to, if any)
FAMILIES = {
    "t5": ("T5", "T5 (2020)"),
    "llama": ("LLaMA", "LLaMA (2023)"),
    "gpt_neox": ("Pythia (GPT-NeoX)", "Pythia (2023)"),
    "bloom": ("BLOOM", "BLOOM (2022)"),
    "gpt2": ("GPT-2", None),
}

PAPER_B_MODELS = ("gpt2", "pythia-160m", "gpt2-xl", "pythia-1.4b", "bloom-1b1")  # paper B Table 1's row order


@dataclass(frozen=True)
class DescriptiveTable:
    """A table made of the model configs: its id, title, published CSV and the function that builds it
    (``(paper_dir or None) → (header, rows, notes)``; ``paper_dir`` given: the published entries beside ours)."""

    id: str
    title: str
    paper_csv: str
    build: Callable[[Path | None], tuple[list[str], list[list[str]], list[str]]]

    def render(self, paper_dir: Path | None = None) -> tuple[str, str]:
        """(LaTeX, Markdown) of the table; ``paper_dir``: the published tables, for ``--compare-paper``."""
        header, rows, notes = self.build(paper_dir)
        md = [f"**{self.title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        md += ["| " + " | ".join(r) + " |" for r in rows]
        if notes:
            md += ["", *notes]
        tex = [r"\begin{table}[t]", r"\centering", r"\small", rf"\begin{{tabular}}{{l{'c' * (len(header) - 1)}}}",
               r"\toprule", " & ".join(header) + r" \\", r"\midrule"]
        tex += [" & ".join(c.replace("_", r"\_") for c in r) + r" \\" for r in rows]
        caption = " ".join([self.title, *notes]).replace("_", r"\_")
        tex += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
        return "\n".join(tex) + "\n", "\n".join(md) + "\n"


def model_configs() -> dict[str, dict]:
    """Every model config by name (raw, unresolved: only plain keys are read)."""
    return {p.stem: dict(OmegaConf.to_container(OmegaConf.load(p), resolve=False))
            for p in sorted((CONF_DIR / "model").glob("*.yaml"))}


def _published(paper_dir: Path | None, name: str) -> list[list[str]]:
    if paper_dir is None:
        return []
    with open(paper_dir / name, encoding="utf-8") as fh:
        return list(csv.reader(fh))


def _beside(ours: str, published: str | None) -> str:
    return f"{ours} ({published})" if published else ours


def _paper_a_table2(paper_dir: Path | None) -> tuple[list[str], list[list[str]], list[str]]:
    """Paper A Table 2: one column per model family of the configs, the models in it and their PE."""
    models = {n: c for n, c in model_configs().items() if c.get("hub_id")}  # the papers' models, not the minis
    pub = _published(paper_dir, "attention-alignment-tables/table2.csv")
    pub_pe = dict(zip(pub[0][1:], pub[1][1:], strict=True)) if pub else {}
    families = [f for f in FAMILIES if any(c["family"] == f for c in models.values())]
    header = ["Models", *(FAMILIES[f][0] for f in families)]
    names = ["configs"]
    pes = ["PE."]
    for f in families:
        mine = [n for n, c in models.items() if c["family"] == f]
        names.append(", ".join(mine))
        pe = " / ".join(dict.fromkeys(str(models[n]["pe"]) for n in mine))
        pes.append(_beside(pe, pub_pe.get(FAMILIES[f][1] or "")))
    notes = []
    if pub:
        ours = {FAMILIES[f][1] for f in families}
        others = [h for h in pub[0][1:] if h not in ours]
        notes.append("Our configs' PE, then the published entry in parentheses; the published table also lists "
                     f"{', '.join(others)}, which lengthx does not configure (GPT-2 is paper B's).")
    return header, [names, pes], notes


def _paper_b_table1(paper_dir: Path | None) -> tuple[list[str], list[list[str]], list[str]]:
    """Paper B Table 1: # of params, PE and L_t of the models it extends, then their offline stand-ins."""
    configs = model_configs()
    pub = {r[0]: r[1:] for r in _published(paper_dir, "segmented-training-tables/table1.csv")[1:]}
    rows = []
    for name in PAPER_B_MODELS:
        c = configs[name]
        theirs = pub.get(str(c.get("paper_b_role")), [None, None, None])
        rows.append([f"{c['display']} ({c['hub_id']})",
                     *(_beside(str(v), p) for v, p in zip((c.get("params", ""), c["pe"], c["l_tr"]), theirs,
                                                          strict=True))])
    for mini in dict.fromkeys(str(configs[n]["mini"]) for n in PAPER_B_MODELS if configs[n].get("mini")):
        c = configs[mini]
        stands_for = ", ".join(configs[n]["display"] for n in PAPER_B_MODELS if configs[n].get("mini") == mini)
        rows.append([f"{mini} (profile=mini, for {stands_for})", str(c.get("params", "")), str(c["pe"]),
                     str(c["l_tr"])])
    notes = ["Our configs' value, then the published one in parentheses."] if pub else []
    return ["Models", "# of params", "PE", "L_t"], rows, notes


DESCRIPTIVE_TABLES: list[DescriptiveTable] = [
    DescriptiveTable("aa_table2", "Paper A, Table 2: language models and their positional embeddings (model configs)",
                     "attention-alignment-tables/table2.csv", _paper_a_table2),
    DescriptiveTable("sb_table1", "Paper B, Table 1: key model characteristics (model configs)",
                     "segmented-training-tables/table1.csv", _paper_b_table1),
]
