"""Tables of both papers as short specs over the results CSV, rendered to booktabs LaTeX and Markdown.

A :class:`TableSpec` says which (task, setting, metric) make the columns, which methods make the rows of each
model group, and how to format values; :func:`render` does the rest for every table. Models are row groups
(the ``none`` method is the model's own row), other methods are "w/ …" rows, as in the papers. Missing
cells stay empty and are listed. ``--compare-paper`` puts the published number beside ours, matched by the
model's ``paper_role`` (mini models) or display name, the method row and the column position.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from lengthx.results import ResultsStore

PAPER_DIR = Path(os.environ.get("LENGTHX_PAPER_DIR",
                               Path(__file__).resolve().parent.parent.parent / "shared" / "paper"))
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

# method id → row label, and the labels the papers' CSVs use for the same rows
METHOD_LABELS = {"pmax": r"w/ $P_{\max}$", "entropy": "w/ $H$", "log": r"w/ $\log_{L_{ex}} L_{tr}$",
                 "truncation": "w/ truncation", "prop1": "w/ Prop. 1", "prop2": "w/ Prop. 2",
                 "pmax-per-layer": r"w/ $P_{\max}$ (per layer)", "entropy-per-layer": "w/ $H$ (per layer)"}
PAPER_ROW_METHODS = {r"w/ P_{\max}": "pmax", "w/ P_{max}": "pmax", "w/ Max.": "pmax", "w/ H": "entropy",
                     "w/ Ent.": "entropy", r"w/ \log_{L_{ex}} L_{tr}": "log", "w/ truncation": "truncation"}


@dataclass(frozen=True)
class Row:
    """An explicit table row: the method and metric it shows, its label here and in the paper's CSV."""

    method: str
    metric: str
    label: str
    paper_label: str


@dataclass(frozen=True)
class Column:
    """One column: a (task, setting label, metric) triple under a header group."""

    group: str
    task: str
    setting: str
    metric: str = "accuracy"


@dataclass(frozen=True)
class TableSpec:
    """Everything that makes one paper table."""

    id: str
    title: str
    columns: tuple[Column, ...]
    methods: tuple[str, ...] = ("none", "pmax", "entropy", "log")
    avg: bool = True
    digits: int = 0
    bold_best: bool = False
    paper_csv: str | None = None  # relative to shared/paper/
    paper_header_rows: int = 3
    rows: tuple[Row, ...] | None = None  # None: the model's row (method none) and one "w/ …" row per method


def _cols(group: str, task: str, settings: list[str], metric: str = "accuracy") -> tuple[Column, ...]:
    return tuple(Column(group, task, s, metric) for s in settings)


def _pairs(metric: str) -> tuple[Column, ...]:
    """Paper A Tables 1/7: each retrieval task at L_tr and at its longest setting."""
    return (_cols("Topic", "topics", ["L_tr", "25"], metric) + _cols("Line", "lines", ["L_tr", "680"], metric)
            + _cols("Passkey", "passkey", ["L_tr", "55k"], metric))


TABLES: dict[str, TableSpec] = {
    spec.id: spec
    for spec in [
        TableSpec(
            "aa_table4", "Paper A, Table 4: retrieval accuracy (%)",
            _cols("Topic, # of topics", "topics", ["5", "10", "15", "20", "25"])
            + _cols("Line, # of lines", "lines", ["200", "300", "400", "500", "600", "680"])
            + _cols("Passkey, # of sentences", "passkey", ["20k", "30k", "40k", "50k", "55k"]),
            paper_csv="attention-alignment-tables/table4.csv",
        ),
        TableSpec(
            "aa_table1", "Paper A, Table 1: dispersed attention of the encoder (τ = 1)",
            _pairs("attn_pmax"), avg=False, digits=2, paper_csv="attention-alignment-tables/table1.csv",
            rows=(Row("stats", "attn_pmax", "$P_{\\max}$", "P_{\\max}"), Row("stats", "attn_entropy", "$H$", "H")),
        ),
        TableSpec(
            "aa_table7", "Paper A, Table 7: l_max of layer 0's average logit vector",
            _pairs("l0_lmax"), avg=False, digits=2, paper_csv="attention-alignment-tables/table7.csv",
            rows=(Row("stats", "l0_lmax", "$l_{\\max}$", "l_{\\max}"),),
        ),
        TableSpec(
            "aa_table9", "Paper A, Table 9: temperatures of the retrieval tasks",
            _cols("Topic, # of topics", "topics", ["5", "10", "15", "20", "25"], "tau")
            + _cols("Line, # of lines", "lines", ["200", "300", "400", "500", "600", "680"], "tau")
            + _cols("Passkey, # of sentences", "passkey", ["20k", "30k", "40k", "50k", "55k"], "tau"),
            methods=("pmax", "entropy", "log", "prop1", "prop2"), avg=False, digits=2,
            paper_csv="attention-alignment-tables/table9.csv",
        ),
    ]
}


def model_info() -> dict[str, dict[str, str]]:
    """Display name and paper role of every configured model."""
    out = {}
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        raw = OmegaConf.load(path)
        out[str(raw.name)] = {"display": str(raw.get("display") or raw.name),
                              "paper_role": str(raw.get("paper_role") or raw.get("display") or raw.name)}
    return out


def latest_ok(df: pd.DataFrame) -> pd.DataFrame:
    """The newest ``ok`` row per (model, method, task, setting, metric)."""
    if df.empty:
        return df
    ok = df[df["status"] == "ok"].copy()
    ok["value"] = pd.to_numeric(ok["value"], errors="coerce")
    ok = ok.sort_values("timestamp")
    return ok.drop_duplicates(["model", "method", "task", "setting", "metric"], keep="last")


def read_paper_table(spec: TableSpec) -> list[tuple[str, str, list[str]]]:
    """Published rows of ``spec`` as (model group, row label, values aligned with the spec's columns)."""
    if spec.paper_csv is None or not (PAPER_DIR / spec.paper_csv).exists():
        return []
    with open(PAPER_DIR / spec.paper_csv, encoding="utf-8") as fh:
        rows = list(csv.reader(fh))[spec.paper_header_rows:]
    out, model = [], ""
    for row in rows:
        label, values = row[0], row[1:]
        if label not in PAPER_ROW_METHODS and all(v in (label, "") for v in values):
            model = label  # a model header row with no numbers
            continue
        if label not in PAPER_ROW_METHODS and not label.startswith("w/"):
            model = label
        out.append((model, label, values))
    return out


def paper_values(published: list[tuple[str, str, list[str]]], role: str, method: str, row: Row | None) -> list[str]:
    """The published values for one of our rows (model ``role``, ``method`` or an explicit ``row``)."""
    for model, label, values in published:
        if row is not None and label == row.paper_label:
            return values
        if row is None and method == "none" and label == role:
            return values
        if row is None and model == role and PAPER_ROW_METHODS.get(label) == method:
            return values
    # the paper gives some rows (e.g. the log row) once, for the last model only
    if row is None and method == "log":
        return next((v for _, lb, v in published if PAPER_ROW_METHODS.get(lb) == "log"), [])
    return []


@dataclass
class Rendered:
    latex: str
    markdown: str
    missing: list[str]


def _fmt(v: float | None, digits: int) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:.{digits}f}"


def render(spec: TableSpec, df: pd.DataFrame, compare_paper: bool = False) -> Rendered:
    """Render ``spec`` from results rows (both formats), listing missing cells."""
    ok = latest_ok(df)
    info = model_info()
    index = {(r.model, r.method, r.task, str(r.setting), r.metric): r.value for r in ok.itertuples()}
    spec_tasks = {c.task for c in spec.columns}
    models = sorted({m for (m, _, t, _, _) in index if t in spec_tasks})
    extra = sorted({me for (m, me, t, _, mt) in index if t in spec_tasks and me not in spec.methods
                    and me != "stats" and mt in {c.metric for c in spec.columns}})
    published = read_paper_table(spec) if compare_paper else []
    body: list[tuple[str, list[str], bool]] = []  # (label, cells, is_model_row)
    missing: list[str] = []
    for model in models:
        role = info.get(model, {}).get("paper_role", model)
        display = info.get(model, {}).get("display", model)
        rows: list[tuple[str, str | None, Row | None]] = (
            [(r.method, r.metric, r) for r in spec.rows] if spec.rows
            else [(m, None, None) for m in spec.methods + tuple(extra)])
        if spec.rows or "none" not in spec.methods:
            body.append((display, [""] * (len(spec.columns) + spec.avg), True))
        for method, metric, row in rows:
            vals = [index.get((model, method, c.task, c.setting, metric or c.metric)) for c in spec.columns]
            for task in dict.fromkeys(c.task for c in spec.columns):
                gaps = [c.setting for c, v in zip(spec.columns, vals, strict=True) if v is None and c.task == task]
                if gaps:
                    missing.append(f"{model} / {row.label if row else method} / {task}: {', '.join(gaps)}")
            if spec.avg:
                vals.append(sum(vals) / len(vals) if all(v is not None for v in vals) else None)
            cells = [_fmt(v, spec.digits) for v in vals]
            if compare_paper:
                pub = paper_values(published, role, method, row)
                cells = [f"{c or '–'} ({pub[i]})" if i < len(pub) and pub[i] else c for i, c in enumerate(cells)]
            if row is not None:
                label, is_model = row.label, False
            else:
                label = display if method == "none" else METHOD_LABELS.get(method, f"w/ {method}")
                is_model = method == "none"
            body.append((label, cells, is_model))
    headers = [c.setting for c in spec.columns] + (["Avg."] if spec.avg else [])
    groups: list[tuple[str, int]] = []
    for c in spec.columns:
        if groups and groups[-1][0] == c.group:
            groups[-1] = (c.group, groups[-1][1] + 1)
        else:
            groups.append((c.group, 1))
    return Rendered(_latex(spec, groups, headers, body), _markdown(spec, groups, headers, body), missing)


def _latex(spec: TableSpec, groups, headers, body) -> str:
    ncols = len(headers)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\begin{{tabular}}{{l{'c' * ncols}}}", r"\toprule"]
    grp = " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{g}}}" for g, n in groups)
    lines.append(rf"Models & {grp}" + (" & " if spec.avg else "") + r" \\")
    start = 2
    rules = []
    for _, n in groups:
        rules.append(rf"\cmidrule(lr){{{start}-{start + n - 1}}}")
        start += n
    lines.append(" ".join(rules))
    lines.append(" & " + " & ".join(headers) + r" \\")
    lines.append(r"\midrule")
    for i, (label, cells, is_model) in enumerate(body):
        if is_model and i > 0:
            lines.append(r"\midrule")
        lines.append(" & ".join([label.replace("_", r"\_") if is_model else label, *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{spec.title}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _markdown(spec: TableSpec, groups, headers, body) -> str:
    group_row = [g for g, n in groups for _ in range(n)] + (["Avg."] if spec.avg else [])
    head = ["Models"] + [f"{g.split(',')[0]} {h}" if g != h else h for g, h in zip(group_row, headers, strict=True)]
    lines = [f"**{spec.title}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, cells, is_model in body:
        name = f"**{label}**" if is_model else label
        plain = name.replace("$", "").replace("\\", "")
        lines.append("| " + " | ".join([plain, *cells]) + " |")
    return "\n".join(lines) + "\n"


def tables_main(argv: list[str]) -> None:
    """``lengthx tables``: render every table that has rows in the results CSV."""
    p = argparse.ArgumentParser(prog="lengthx tables", description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", default="results/mini", help="directory holding results.csv")
    p.add_argument("--out", default=None, help="where to write .tex/.md (default: <results-dir>/tables)")
    p.add_argument("--format", choices=["latex", "markdown", "both"], default="both")
    p.add_argument("--compare-paper", action="store_true", help="show the published value beside ours")
    args = p.parse_args(argv)
    store = ResultsStore(Path(args.results_dir))
    df = store.read()
    if args.compare_paper and not PAPER_DIR.is_dir():
        print(f"--compare-paper: the published tables are not at {PAPER_DIR}; set LENGTHX_PAPER_DIR")
    if df.empty:
        print(f"no results in {store.csv_path}; run e.g. 'lengthx run task=passkey method=none' first")
        return
    out = Path(args.out or Path(args.results_dir) / "tables")
    out.mkdir(parents=True, exist_ok=True)
    for spec in TABLES.values():
        tasks = {c.task for c in spec.columns}
        if not df["task"].isin(tasks).any():
            continue
        r = render(spec, df, compare_paper=args.compare_paper)
        suffix = "_vs_paper" if args.compare_paper else ""
        if args.format in ("latex", "both"):
            (out / f"{spec.id}{suffix}.tex").write_text(r.latex)
        if args.format in ("markdown", "both"):
            (out / f"{spec.id}{suffix}.md").write_text(r.markdown)
        print(r.markdown if args.format != "latex" else r.latex)
        if r.missing:
            print(f"cells of {spec.id} with no result yet (model / method / task: settings):")
            for m in r.missing:
                print(f"  - {m}")
        print(f"wrote {out / spec.id}{suffix}.{{tex,md}}\n")
