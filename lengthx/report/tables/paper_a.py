"""Paper A's tables (Chi, Fan, Rudnicky) as specs over the results CSV.

Columns follow the published CSVs (``lengthx/published/attention-alignment-tables``) positionally, so
``--compare-paper`` pairs our value with the paper's by position. Column settings are the task configs'
labels (``conf/task/*.yaml``); methods are the rows under each model.
"""

from __future__ import annotations

from lengthx.report.tables.spec import Column, Row, TableSpec, avg_col, cols

TEMPERATURE_METHODS = ("none", "pmax", "entropy", "log")


CODE_METHODS = ("none", "pmax", "entropy", "log", "truncation")


RETRIEVAL_COLUMNS = {
    "topics": ("Topic, # of topics", ["5", "10", "15", "20", "25"]),
    "lines": ("Line, # of lines", ["200", "300", "400", "500", "600", "680"]),
    "passkey": ("Passkey, # of sentences", ["20k", "30k", "40k", "50k", "55k"]),
}


def _retrieval(metric: str) -> tuple[Column, ...]:
    return sum((cols(g, t, s, metric) for t, (g, s) in RETRIEVAL_COLUMNS.items()), ())


def _pairs(metric: str) -> tuple[Column, ...]:
    """Tables 1/7: each retrieval task at L_tr and at its longest setting."""
    return sum((cols(g.split(",")[0], t, ["L_tr", s[-1]], metric) for t, (g, s) in RETRIEVAL_COLUMNS.items()), ())


LM_SETTINGS = ["1024", "2048", "4096", "8192", "15000"]


CODE_SETTINGS = [f"{k}k" for k in range(1, 16)]


MDQA_POSITIONS = {10: [0, 4, 9], 20: [0, 4, 9, 14, 19], 30: [0, 4, 9, 14, 19, 24, 29]}


def _mdqa(n: int) -> list[str]:
    return [f"{n}docs@{i}" for i in MDQA_POSITIONS[n]]


TABLE3 = TableSpec(
    "aa_table3", "Paper A, Table 3: language modeling perplexity (T5-LM; lower is better)",
    cols("Sequence Length (L_ex)", "lm", LM_SETTINGS, "perplexity"),
    methods=TEMPERATURE_METHODS, avg=True, digits=1, bold=("Avg.",),
    paper_csv="attention-alignment-tables/table3.csv",
    lower_is_better=True, overflow=1000.0, sig_digits_above=100.0, paper_reference="T5-XL-LM",
    intervals=True,
)


TABLE4 = TableSpec(
    "aa_table4", "Paper A, Table 4: retrieval accuracy (%)",
    _retrieval("accuracy"), methods=TEMPERATURE_METHODS, avg=True, digits=0, bold=("Avg.",),
    paper_csv="attention-alignment-tables/table4.csv",
    intervals=True,
)


TABLE5 = TableSpec(
    "aa_table5", "Paper A, Table 5: multi-document QA accuracy (%)",
    (avg_col("10 Docs", "mdqa", _mdqa(10), "10docs@avg"),
     avg_col("20 Docs", "mdqa", _mdqa(20), "20docs@avg"))
    + cols("30 Docs, golden doc at different positions", "mdqa", _mdqa(30),
            headers=[str(i) for i in MDQA_POSITIONS[30]])
    + (avg_col("30 Docs, golden doc at different positions", "mdqa", _mdqa(30), "30docs@avg"),),
    methods=TEMPERATURE_METHODS, avg=False, digits=1, bold=("Avg.",),
    paper_csv="attention-alignment-tables/table5.csv",
    improvement=("pmax", "none"), intervals=True,
)


def _code_table(table_id: str, title: str, settings: list[str], metric: str, paper_csv: str) -> TableSpec:
    """A code completion table (paper A §5.4: Tables 6, 12 and 13): one ``metric`` over ``settings``, CodeT5+."""
    return TableSpec(
        table_id, f"Paper A, {title}",
        cols("Sequence Length (L_ex)", "code_completion", settings, metric),
        methods=CODE_METHODS, avg=False, digits=1,
        paper_csv=f"attention-alignment-tables/{paper_csv}", paper_reference="CodeT5+",
        intervals=True,
    )


TABLE6_EM = _code_table("aa_table6_em", "Table 6 (left): code completion exact match (%)", CODE_SETTINGS[:6],
                        "exact_match", "table6_exact_match.csv")
TABLE6_ES = _code_table("aa_table6_es", "Table 6 (right): code completion edit similarity", CODE_SETTINGS[:6],
                        "edit_similarity", "table6_edit_similarity.csv")
TABLE12 = _code_table("aa_table12", "Table 12: code completion exact match (%), 1k-15k", CODE_SETTINGS,
                      "exact_match", "table12.csv")
TABLE13 = _code_table("aa_table13", "Table 13: code completion edit similarity, 1k-15k", CODE_SETTINGS,
                      "edit_similarity", "table13.csv")


TABLE14 = TableSpec(
    "aa_table14", "Paper A, Table 14: multi-document QA accuracy (%), every gold position",
    sum((cols(f"{n} Docs", "mdqa", _mdqa(n), headers=[str(i) for i in MDQA_POSITIONS[n]])
         for n in (10, 20, 30)), ()),
    methods=TEMPERATURE_METHODS, avg=False, digits=1,
    paper_csv="attention-alignment-tables/table14.csv",
)


CODE_KEY = TableSpec(
    "aa_code_key", "Paper A, §5.4: code key retrieval accuracy (%), ~16k tokens (reported in the text)",
    cols("Code key retrieval", "code_key", ["16k"]),
    methods=TEMPERATURE_METHODS, avg=False, digits=0,
    paper_csv=None, bold=("16k",), paper_reference="CodeT5+",
    paper_values=(("CodeT5+", "none", ("0",)), ("CodeT5+", "pmax", ("87",)),
                  ("CodeT5+", "entropy", ("80",)), ("CodeT5+", "log", ("85",))),
    intervals=True,
)


TABLE1 = TableSpec(
    "aa_table1", "Paper A, Table 1: dispersed attention of the encoder (τ = 1)",
    _pairs("attn_pmax"), avg=False, digits=2, paper_csv="attention-alignment-tables/table1.csv",
    rows=(Row("stats", "attn_pmax", r"$P_{\max}$", r"P_{\max}"), Row("stats", "attn_entropy", "$H$", "H")),
)


TABLE7 = TableSpec(
    "aa_table7", "Paper A, Table 7: l_max of layer 0's average logit vector",
    _pairs("l0_lmax"), avg=False, digits=2, paper_csv="attention-alignment-tables/table7.csv",
    rows=(Row("stats", "l0_lmax", r"$l_{\max}$", r"l_{\max}"),),
)


# the paper's rows; the extensions (prop1, prop2, per-layer alignment) follow as extra rows when they were run
TAU_METHODS = ("pmax", "entropy", "log")


TABLE8 = TableSpec(
    "aa_table8", "Paper A, Table 8: temperatures of language modeling",
    cols("Sequence Length (L_ex)", "lm", LM_SETTINGS, "tau"), methods=TAU_METHODS, avg=False, digits=2,
    paper_csv="attention-alignment-tables/table8.csv", shared_rows=("log",), paper_reference="T5-XL-LM",
)


TABLE9 = TableSpec(
    "aa_table9", "Paper A, Table 9: temperatures of the retrieval tasks",
    _retrieval("tau"), methods=TAU_METHODS, avg=False, digits=2, paper_csv="attention-alignment-tables/table9.csv",
    shared_rows=("log",),
)


# the paper prints one τ per document count ("the same for every gold position"); Algorithm 1 runs per setting,
# so each gold position has its own τ, compared with the paper's τ of its document count
TABLE10 = TableSpec(
    "aa_table10", "Paper A, Table 10: temperatures of multi-document QA (τ per calibrated gold position)",
    sum((cols(f"{n} Docs", "mdqa", _mdqa(n), "tau", headers=[str(i) for i in MDQA_POSITIONS[n]])
         for n in (10, 20, 30)), ()),
    methods=TAU_METHODS, avg=False, digits=2, paper_csv="attention-alignment-tables/table10.csv",
    paper_header_rows=2, shared_rows=("log",),
    paper_columns=tuple(k for k, n in enumerate((10, 20, 30)) for _ in MDQA_POSITIONS[n]),
)


TABLE11 = TableSpec(
    "aa_table11", "Paper A, Table 11: temperatures of code completion",
    cols("Sequence Length (L_ex)", "code_completion", [*CODE_SETTINGS, "16k"], "tau"), methods=TAU_METHODS, avg=False,
    digits=2, paper_csv="attention-alignment-tables/table11.csv", shared_rows=("log",), paper_reference="CodeT5+",
)


PAPER_A_SPECS: list[TableSpec] = [TABLE1, TABLE3, TABLE4, TABLE5, TABLE6_EM, TABLE6_ES, TABLE7, TABLE8, TABLE9,
                                  TABLE10, TABLE11, TABLE12, TABLE13, TABLE14, CODE_KEY]
