"""What a table is: columns, rows and formatting, as data (docs/design.md §7). Renderers live in ``render.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# method id → row label; and the labels the papers' CSVs use for the same rows
METHOD_LABELS = {"pmax": r"w/ $P_{\max}$", "entropy": "w/ $H$", "log": r"w/ $\log_{L_{ex}} L_{tr}$",
                 "truncation": "w/ truncation", "prop1": "w/ Prop. 1", "prop2": "w/ Prop. 2",
                 "pmax-per-layer": r"w/ $P_{\max}$ (per layer; layer mean)",
                 "entropy-per-layer": "w/ $H$ (per layer; layer mean)",
                 "pmax-per-layer-bisect": r"w/ $P_{\max}$ (per layer, bisection; layer mean)",
                 "entropy-per-layer-bisect": "w/ $H$ (per layer, bisection; layer mean)",
                 "pretrained": "pre-trained", "ootb": "OOTB", "full": "full", "da": "DA"}


PAPER_ROW_METHODS = {r"w/ P_{\max}": "pmax", "w/ P_{max}": "pmax", "w/ Max.": "pmax", "w/ H": "entropy",
                     "w/ Ent.": "entropy", r"w/ \log_{L_{ex}} L_{tr}": "log", "w/ truncation": "truncation",
                     "Improvement": "improvement"}


@dataclass(frozen=True)
class Column:
    """One column: a (task, setting label, metric) triple under a header group.

    ``header`` replaces the setting label in the header row; ``average_of`` makes the column the mean of
    those settings (same task and metric), present only when all of them are.
    """

    group: str
    task: str
    setting: str
    metric: str = "accuracy"
    header: str | None = None
    average_of: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return self.header or self.setting


@dataclass(frozen=True)
class Row:
    """An explicit table row: the method and metric it shows, its label here and in the paper's CSV."""

    method: str
    metric: str
    label: str
    paper_label: str


@dataclass(frozen=True)
class TableSpec:
    """Everything that makes one paper table.

    Rows: by default each model is a group whose first row is the model itself (method ``none`` or the
    first method) followed by one "w/ …" row per method; ``rows`` gives explicit (method, metric) rows.
    ``models`` restricts and orders the model groups; ``method_at_setting`` first looks a method up as
    ``f"{method}@{setting}"`` (paper B: a model trained for that length). Formatting: ``digits``,
    ``overflow`` (values above print ``>1k``), ``sig_digits_above`` (values at or above it lose their
    decimals), ``bold`` (headers whose best value per group is bold; the minimum if ``lower_is_better``),
    ``improvement`` ((method, baseline): a signed-difference row after the method's row).
    ``shared_rows``: methods whose row the paper prints once, after the last model (paper A Tables 8-10:
    τ = log_{L_ex} L_tr depends on the length only), so a planned cell of any model fills it.
    ``intervals``: each cell carries its 95% interval over examples (Wilson for right/wrong scores, else the
    bootstrap; :mod:`lengthx.report.tables.intervals`) and a second table gives each
    method's paired difference to τ = 1, both from the cells' records (:mod:`lengthx.report.tables.intervals`).
    ``paper_columns``: the published column each of ours is compared with, where the paper prints one number
    for several of our columns (paper A Table 10: one τ per document count, ours per calibrated gold position);
    ``None`` = the same position.
    ``labels`` name rows beyond :data:`METHOD_LABELS`; ``derive`` adds rows computed from the others (and notes
    on how) before the table is filled (the extension table: the best τ rule of each model, chosen on OOTB).
    ``paper_reference``: for ``--compare-paper``, the published model a stand-in (a model config with a
    ``paper_role``, e.g. mini-t5 for Flan-T5-XL) is set beside when the table has no row for its role
    (Table 3 has T5-LM models only, Tables 6/11-13 CodeT5+ only).
    """

    id: str
    title: str
    columns: tuple[Column, ...]
    methods: tuple[str, ...] = ("none", "pmax", "entropy", "log")
    avg: bool = True
    digits: int = 0
    paper_csv: str | None = None  # relative to lengthx/published/
    paper_header_rows: int = 3
    rows: tuple[Row, ...] | None = None
    models: tuple[str, ...] | None = None
    method_at_setting: bool = False
    lower_is_better: bool = False
    overflow: float | None = None
    sig_digits_above: float | None = None
    bold: tuple[str, ...] = ()
    improvement: tuple[str, str] | None = None
    paper_values: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (paper model, method, values) from the text
    paper_key: str = "model"  # how the paper's CSV names row groups: "model" (grid CSVs) or "pe" (paper B)
    shared_rows: tuple[str, ...] = ()  # methods the paper prints once for all models (log τ: L_ex, L_tr only)
    paper_reference: str | None = None  # published row group a stand-in is compared with, if not its paper_role
    extra_methods: bool = True  # also a row for methods the results hold beyond ``methods`` (False: exactly those)
    intervals: bool = False  # 95% interval beside each cell, paired differences to ``paired_with`` below (intervals.py)
    paired_with: str = "none"  # the row the paired differences are to: τ = 1 (paper A), OOTB (paper B)
    paper_columns: tuple[int, ...] | None = None  # published column of each of ours (None: the same position)

    labels: tuple[tuple[str, str], ...] = ()  # (method, row label) pairs before METHOD_LABELS
    # derived rows: (newest ok rows) → (those rows plus derived ones, notes printed under the table after derive_title)
    derive: Callable[[Any], tuple[Any, list[str]]] | None = None
    derive_title: str = ""

    def paper_column(self, j: int) -> int:
        """The published column our column ``j`` is compared with (an "Avg." column keeps its position)."""
        if self.paper_columns is None or j >= len(self.paper_columns):
            return j
        return self.paper_columns[j]

    @property
    def tasks(self) -> set[str]:
        return {c.task for c in self.columns}


def cols(group: str, task: str, settings: list[str], metric: str = "accuracy",
         headers: list[str] | None = None) -> tuple[Column, ...]:
    """Columns for ``settings`` of one task under one header group."""
    heads = headers or [None] * len(settings)
    return tuple(Column(group, task, s, metric, header=h) for s, h in zip(settings, heads, strict=True))


def avg_col(group: str, task: str, settings: list[str], name: str, metric: str = "accuracy") -> Column:
    """A derived "Avg." column: the mean of ``settings`` (e.g. Table 5's per-document-count averages)."""
    return Column(group, task, name, metric, header="Avg.", average_of=tuple(settings))
