"""``lengthx tables``: render every table that has rows in the results CSV (LaTeX and Markdown), optionally
beside the published numbers (:mod:`lengthx.report.tables`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lengthx.config import default_results_dir
from lengthx.core.store import ResultsStore
from lengthx.report.tables.published import PAPER_DIR
from lengthx.report.tables.render import render
from lengthx.report.tables.summary import summary_markdown


def tables_main(argv: list[str]) -> None:
    """``lengthx tables``: render every table that has rows in the results CSV."""
    from lengthx.report.tables import TABLES

    p = argparse.ArgumentParser(prog="lengthx tables", description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", default=str(default_results_dir()),
                   help="directory holding results.csv (default: the one `lengthx run` writes, profile mini)")
    p.add_argument("--out", default=None, help="where to write .tex/.md (default: <results-dir>/tables)")
    p.add_argument("--format", choices=["latex", "markdown", "both"], default="both")
    p.add_argument("--compare-paper", action="store_true", help="show the published value beside ours")
    p.add_argument("--summary", action="store_true",
                   help="print one compact table of the cells present (setting × method, with τ); write nothing")
    args = p.parse_args(argv)
    store = ResultsStore(Path(args.results_dir))
    df = store.read()
    if args.summary:
        print(summary_markdown(df) if not df.empty else f"no results in {store.csv_path}")
        print(f"\nevery paper table: lengthx tables --results-dir {args.results_dir}  (written to "
              f"{Path(args.results_dir) / 'tables'})")
        return
    if args.compare_paper and not PAPER_DIR.is_dir():
        print(f"lengthx tables --compare-paper: the published tables are not at {PAPER_DIR}: this lengthx install "
              "is incomplete; reinstall it (pip install lengthx, or pip install -e . in a clone)", file=sys.stderr)
        raise SystemExit(2)
    if df.empty:
        print(f"no results in {store.csv_path}; run e.g. 'lengthx run task=passkey method=none' first")
        return
    out = Path(args.out or Path(args.results_dir) / "tables")
    out.mkdir(parents=True, exist_ok=True)
    for spec in TABLES.values():
        if not df["task"].isin(spec.tasks).any():
            continue
        r = render(spec, df, compare_paper=args.compare_paper, store=store)
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
        ext = {"latex": "tex", "markdown": "md", "both": "{tex,md}"}[args.format]
        print(f"wrote {out / spec.id}{suffix}.{ext}\n")
