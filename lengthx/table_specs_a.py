"""Specs of paper A's Tables 3, 4, 5, 6, 12, 13, 14 (and §5.4's code key numbers) over the results CSV.

Each spec lists the columns positionally as in the published CSV (``shared/paper/attention-alignment-tables``)
so that ``--compare-paper`` can pair our value with the paper's by position. Column settings are the task
configs' labels (``conf/task/*.yaml``); methods are the rows under each model.

Two small extensions of :mod:`lengthx.tables`' dataclasses carry what these tables need beyond the base
renderer; they subclass the base ones, so the current renderer accepts them and simply leaves the new
features out (such cells stay empty) until it implements them:

- :class:`ColumnA`: ``header`` (shown instead of the setting label, e.g. "0" for ``30docs@0``) and
  ``average_of`` (a derived column: the mean of these settings of the same task and metric, present only
  when all are; e.g. Table 5's "10 Docs, Avg.").
- :class:`TableSpecA`: ``lower_is_better`` (perplexity: "best" is the minimum), ``overflow`` (values, and
  averages, above it print as ``>1k``), ``improvement`` (a signed-difference row, e.g. Table 5's
  "Improvement" = w/ P_max − the model's own row, printed ``+0.7`` / ``-1.8`` right after the method's row),
  ``bold`` (which columns get the best value of each model group in bold; Table 3-5 bold the averages),
  ``sig_digits_above`` (Table 3 prints 109 and 246 without decimals: values >= 100 get no decimals) and
  ``paper_values`` (published numbers given in the text rather than in a table, for ``--compare-paper``).
"""

from __future__ import annotations

from dataclasses import dataclass

from lengthx.tables import Column, TableSpec

TEMPERATURE_METHODS = ("none", "pmax", "entropy", "log")
CODE_METHODS = ("none", "pmax", "entropy", "log", "truncation")


@dataclass(frozen=True)
class ColumnA(Column):
    """A column with an optional display header and an optional average over other settings."""

    header: str | None = None
    average_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableSpecA(TableSpec):
    """A table spec with the formatting paper A's tables use (see the module docstring)."""

    lower_is_better: bool = False
    overflow: float | None = None
    improvement: tuple[str, str] | None = None  # (method, baseline method)
    bold: tuple[str, ...] = ("Avg.",)  # headers of the columns whose per-group best is bold
    sig_digits_above: float | None = None
    paper_values: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (paper model, method, values)


def _cols(group: str, task: str, settings: list[str], metric: str = "accuracy",
          headers: list[str] | None = None) -> tuple[ColumnA, ...]:
    heads = headers or [None] * len(settings)
    return tuple(ColumnA(group, task, s, metric, header=h) for s, h in zip(settings, heads, strict=True))


def _avg(group: str, task: str, settings: list[str], name: str, metric: str = "accuracy") -> ColumnA:
    return ColumnA(group, task, name, metric, header="Avg.", average_of=tuple(settings))


LM_SETTINGS = ["1024", "2048", "4096", "8192", "15000"]
CODE_SETTINGS = [f"{k}k" for k in range(1, 16)]
MDQA_POSITIONS = {10: [0, 4, 9], 20: [0, 4, 9, 14, 19], 30: [0, 4, 9, 14, 19, 24, 29]}


def _mdqa(n: int) -> list[str]:
    return [f"{n}docs@{i}" for i in MDQA_POSITIONS[n]]


TABLE3 = TableSpecA(
    "aa_table3", "Paper A, Table 3: language modeling perplexity (T5-LM; lower is better)",
    _cols("Sequence Length (L_ex)", "lm", LM_SETTINGS, "perplexity"),
    methods=TEMPERATURE_METHODS, avg=True, digits=1, bold_best=True,
    paper_csv="attention-alignment-tables/table3.csv",
    lower_is_better=True, overflow=1000.0, sig_digits_above=100.0,
)

TABLE4 = TableSpecA(
    "aa_table4", "Paper A, Table 4: retrieval accuracy (%)",
    _cols("Topic, # of topics", "topics", ["5", "10", "15", "20", "25"])
    + _cols("Line, # of lines", "lines", ["200", "300", "400", "500", "600", "680"])
    + _cols("Passkey, # of sentences", "passkey", ["20k", "30k", "40k", "50k", "55k"]),
    methods=TEMPERATURE_METHODS, avg=True, digits=0, bold_best=True,
    paper_csv="attention-alignment-tables/table4.csv",
)

TABLE5 = TableSpecA(
    "aa_table5", "Paper A, Table 5: multi-document QA accuracy (%)",
    (_avg("10 Docs", "mdqa", _mdqa(10), "10docs@avg"),
     _avg("20 Docs", "mdqa", _mdqa(20), "20docs@avg"))
    + _cols("30 Docs, golden doc at different positions", "mdqa", _mdqa(30),
            headers=[str(i) for i in MDQA_POSITIONS[30]])
    + (_avg("30 Docs, golden doc at different positions", "mdqa", _mdqa(30), "30docs@avg"),),
    methods=TEMPERATURE_METHODS, avg=False, digits=1, bold_best=True,
    paper_csv="attention-alignment-tables/table5.csv",
    improvement=("pmax", "none"),
)

TABLE6_EM = TableSpecA(
    "aa_table6_em", "Paper A, Table 6 (left): code completion exact match (%)",
    _cols("Sequence Length (L_ex)", "code_completion", CODE_SETTINGS[:6], "exact_match"),
    methods=CODE_METHODS, avg=False, digits=1,
    paper_csv="attention-alignment-tables/table6_exact_match.csv",
    bold=(),
)

TABLE6_ES = TableSpecA(
    "aa_table6_es", "Paper A, Table 6 (right): code completion edit similarity",
    _cols("Sequence Length (L_ex)", "code_completion", CODE_SETTINGS[:6], "edit_similarity"),
    methods=CODE_METHODS, avg=False, digits=1,
    paper_csv="attention-alignment-tables/table6_edit_similarity.csv",
    bold=(),
)

TABLE12 = TableSpecA(
    "aa_table12", "Paper A, Table 12: code completion exact match (%), 1k-15k",
    _cols("Sequence Length (L_ex)", "code_completion", CODE_SETTINGS, "exact_match"),
    methods=CODE_METHODS, avg=False, digits=1,
    paper_csv="attention-alignment-tables/table12.csv",
    bold=(),
)

TABLE13 = TableSpecA(
    "aa_table13", "Paper A, Table 13: code completion edit similarity, 1k-15k",
    _cols("Sequence Length (L_ex)", "code_completion", CODE_SETTINGS, "edit_similarity"),
    methods=CODE_METHODS, avg=False, digits=1,
    paper_csv="attention-alignment-tables/table13.csv",
    bold=(),
)

TABLE14 = TableSpecA(
    "aa_table14", "Paper A, Table 14: multi-document QA accuracy (%), every gold position",
    sum((_cols(f"{n} Docs", "mdqa", _mdqa(n), headers=[str(i) for i in MDQA_POSITIONS[n]])
         for n in (10, 20, 30)), ()),
    methods=TEMPERATURE_METHODS, avg=False, digits=1,
    paper_csv="attention-alignment-tables/table14.csv",
    bold=(),
)

CODE_KEY = TableSpecA(
    "aa_code_key", "Paper A, §5.4: code key retrieval accuracy (%), ~16k tokens (reported in the text)",
    _cols("Code key retrieval", "code_key", ["16k"]),
    methods=TEMPERATURE_METHODS, avg=False, digits=0, bold_best=True,
    paper_csv=None, bold=("16k",),
    paper_values=(("CodeT5+", "none", ("0",)), ("CodeT5+", "pmax", ("87",)),
                  ("CodeT5+", "entropy", ("80",)), ("CodeT5+", "log", ("85",))),
)

PAPER_A_SPECS: list[TableSpec] = [TABLE3, TABLE4, TABLE5, TABLE6_EM, TABLE6_ES, TABLE12, TABLE13, TABLE14,
                                  CODE_KEY]

__all__ = ["PAPER_A_SPECS", "ColumnA", "TableSpecA"]
