"""``lengthx tables``: render every table that has rows in the results CSV (LaTeX and Markdown), optionally
beside the published numbers (:mod:`lengthx.report.tables`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lengthx.cli.common import check_results_dir_argument
from lengthx.config import default_results_dir


def tables_main(argv: list[str]) -> None:
    """``lengthx tables``: render every table that has rows in the results CSV, and the tables of the
    model configs (paper A Table 2, paper B Table 1)."""
    p = argparse.ArgumentParser(prog="lengthx tables", description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", default=str(default_results_dir()),
                   help="directory holding results.csv (default: the one `lengthx run` writes, profile mini)")
    p.add_argument("--out", default=None, help="where to write .tex/.md (default: <results-dir>/tables)")
    p.add_argument("--format", choices=["latex", "markdown", "both"], default="both")
    p.add_argument("--compare-paper", action="store_true", help="show the published value beside ours")
    p.add_argument("--summary", action="store_true",
                   help="print one compact table of the cells present (setting × method, with τ); write no table")
    p.add_argument("--check", action="store_true",
                   help="check that every cell the tables show is what the current code and checkpoints compute "
                        "(its hash, from the command that computed it): exit 0, or 1 naming the stale cells; "
                        "write no table")
    p.add_argument("--no-check", action="store_true",
                   help="render without checking the cells' currency (faster; stale cells are then not marked)")
    args = p.parse_args(argv)
    check_results_dir_argument(args.results_dir)
    # after the arguments: --help and their errors answer at once
    from lengthx.core.store import ResultsStore, git_commit, make_dirs
    from lengthx.report.tables import DESCRIPTIVE, TABLES
    from lengthx.report.tables.published import PAPER_DIR
    from lengthx.report.tables.render import render
    from lengthx.report.tables.summary import code_versions_note, summary_markdown

    store = ResultsStore(Path(args.results_dir))
    df = store.read()
    if args.check:
        verdict = currency(store, df)
        print("\n".join(verdict.lines()))
        raise SystemExit(0 if verdict.ok else 1)
    stale = set() if args.no_check or df.empty else set(currency(store, df).stale)
    if args.summary:
        print(summary_markdown(df, git_commit(), stale) if not df.empty else f"no results in {store.csv_path}")
        if not df.empty:
            from lengthx.report.tables.reading import readings

            lines = readings(store, df)
            if lines:
                print("\nWhat each method did (95% intervals; Δ: paired difference to τ = 1 on the same examples):")
                print("\n".join(f"- {line}" for line in lines))
        print(f"\nevery paper table: lengthx tables --results-dir {args.results_dir}  (written to "
              f"{Path(args.results_dir) / 'tables'})")
        return
    if args.compare_paper and not PAPER_DIR.is_dir():
        print(f"lengthx tables --compare-paper: the published tables are not at {PAPER_DIR}: this lengthx install "
              "is incomplete; reinstall it (pip install lengthx, or pip install -e . in a clone)", file=sys.stderr)
        raise SystemExit(2)
    out = Path(args.out or Path(args.results_dir) / "tables")
    if args.out is None:
        store.check_inside(out)  # a planted link must not carry the tables out of the results directory
    make_dirs(out)
    note = code_versions_note(df, git_commit())
    if note:
        print(f"lengthx tables: {note}", file=sys.stderr)
    suffix = "_vs_paper" if args.compare_paper else ""
    for table in DESCRIPTIVE.values():  # made of the model configs: written with or without results
        latex, markdown = table.render(PAPER_DIR if args.compare_paper else None)
        _write(out, f"{table.id}{suffix}", args.format, latex, markdown)
    if df.empty:
        print(f"no results in {store.csv_path}; run e.g. 'lengthx run task=passkey method=none' first")
        return
    for spec in TABLES.values():
        if not df["task"].isin(spec.tasks).any():
            continue
        r = render(spec, df, compare_paper=args.compare_paper, store=store, stale=stale)
        _write(out, f"{spec.id}{suffix}", args.format, r.latex, r.markdown)
        if r.missing:
            print(f"cells of {spec.id} with no result yet (model / method / task: settings):")
            for m in r.missing:
                print(f"  - {m}")


def currency(store: Any, df: Any) -> Any:
    """:func:`lengthx.core.currency.check_currency` of the store, its progress on stderr."""
    from lengthx.core.currency import check_currency

    return check_currency(store.root, df, progress=lambda line: print(f"lengthx tables: {line}", file=sys.stderr))


def _write(out: Path, stem: str, fmt: str, latex: str, markdown: str) -> None:
    """Write and print one rendered table in the chosen format(s); each file is written beside its place and
    renamed, so a write cut short never leaves half a table in place of the previous one."""
    from lengthx.core.store import write_atomic

    if fmt in ("latex", "both"):
        write_atomic(out / f"{stem}.tex", latex.encode("utf-8"))
    if fmt in ("markdown", "both"):
        write_atomic(out / f"{stem}.md", markdown.encode("utf-8"))
    print(markdown if fmt != "latex" else latex)
    ext = {"latex": "tex", "markdown": "md", "both": "{tex,md}"}[fmt]
    print(f"wrote {out / stem}.{ext}\n")
