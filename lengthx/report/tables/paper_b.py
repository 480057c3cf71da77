"""Paper B's tables (Karypis, McAuley, Karypis) as specs over the ``segmented_ppl`` rows.

Method ids: ``pretrained`` (the published checkpoint), ``ootb`` (one epoch of domain adaptation from it,
paper B §4.3; APE interpolated) and the ``lengthx train`` labels of the runs that start from OOTB (``full``,
``chunk-α``, ``prefix-α``, ``da``), suffixed ``@βL_t`` when trained for L_e = βL_t, which
``method_at_setting`` looks up per column. The published CSVs are tidy: rows keyed by PE (Tables 3-5) or
by model (Table 2).
"""

from __future__ import annotations

from lengthx.report.tables.spec import Column, TableSpec, cols

PPL = "segmented_ppl"


DEV_METHODS = ("ootb", "full", "chunk-0.125", "chunk-0.25", "chunk-0.5", "prefix-0.25", "prefix-0.5")


PAPER_B_SPECS: list[TableSpec] = [
    TableSpec("sb_table2", "Paper B, Table 2: perplexity at L_t, as published and after domain adaptation (OOTB)",
              (Column("Perplexity", PPL, "L_t", "ppl", header="L_t"),), methods=("pretrained", "ootb"), avg=False, digits=3, extra_methods=False,
              models=("gpt2", "pythia-160m", "gpt2-xl", "pythia-1.4b", "bloom-1b1"),
              paper_csv="segmented-training-tables/table2.csv", paper_key="model_b", intervals=True, paired_with="ootb"),
    TableSpec("sb_table3", "Paper B, Table 3: context-extension methods on the development models (perplexity)",
              cols("Perplexity", PPL, ["2L_t", "4L_t"], "ppl"), methods=DEV_METHODS, avg=False, digits=3, extra_methods=False,
              models=("gpt2", "pythia-160m"), method_at_setting=True,
              paper_csv="segmented-training-tables/table3.csv", paper_key="pe", intervals=True, paired_with="ootb"),
    TableSpec("sb_table4", "Paper B, Table 4: the larger models, OOTB vs chunk-0.25 (perplexity)",
              cols("Perplexity", PPL, ["2L_t", "4L_t"], "ppl"), methods=("ootb", "chunk-0.25"), avg=False,
              digits=3, extra_methods=False, models=("gpt2-xl", "pythia-1.4b", "bloom-1b1"), method_at_setting=True,
              paper_csv="segmented-training-tables/table4.csv", paper_key="pe", intervals=True, paired_with="ootb"),
    TableSpec("sb_table5", "Paper B, Table 5: further domain adaptation (DA) vs chunk-0.25 (perplexity)",
              cols("Perplexity", PPL, ["2L_t", "4L_t"], "ppl"), methods=("ootb", "da", "chunk-0.25"), avg=False,
              digits=3, extra_methods=False, models=("gpt2-xl", "bloom-1b1"), method_at_setting=True,
              paper_csv="segmented-training-tables/table5.csv", paper_key="pe", intervals=True, paired_with="ootb"),
]
