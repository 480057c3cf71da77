"""``lengthx figures``: paper A's and paper B's figures from the results directory, a figure of whatever ran
(every model and task: scores against length per method, with intervals), and paper B's training curves from the
runs directory (PNG and PDF, :mod:`lengthx.report.figures`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lengthx.cli.common import check_results_dir_argument
from lengthx.config import default_results_dir


def figures_main(argv: list[str]) -> None:
    """``lengthx figures``: render every figure whose inputs exist in the results and runs directories."""
    p = argparse.ArgumentParser(prog="lengthx figures", description=__doc__.splitlines()[0])
    p.add_argument("--results-dir", default=str(default_results_dir()))
    p.add_argument("--runs-dir", default=None,
                   help="lengthx train's runs of the results' profile (default: $LENGTHX_RUNS or runs/, then the "
                        "results directory's name, e.g. runs/mini): their metrics.jsonl give the training curves")
    p.add_argument("--out", default=None, help="default: <results-dir>/figures")
    args = p.parse_args(argv)
    # the figures go to <results-dir>/figures; a results directory the user names must exist, unless the figures
    # are training curves alone (--runs-dir given) or it is the default place (nothing run yet)
    named = args.results_dir != str(default_results_dir())
    check_results_dir_argument(args.results_dir, must_exist=named and args.runs_dir is None)
    # after the arguments: --help and their errors answer without matplotlib, pandas or torch
    from lengthx.api.data import read_results
    from lengthx.core.store import ResultsStore, read_json
    from lengthx.report.figures.paper_a import _save, figure1_bias, figure2_qq, temperature_figure
    from lengthx.report.figures.paper_b import figure2_ootb, figure3_medians
    from lengthx.report.figures.ran import ran_figures
    from lengthx.report.figures.tau_vs_segmented import tau_vs_segmented_figure
    from lengthx.report.figures.training import training_curves
    from lengthx.segmented.plan import RUNS_DIR

    root = Path(args.results_dir)
    out = Path(args.out or root / "figures")
    store = ResultsStore(root)
    if args.out is None:
        store.check_inside(out)  # a planted link must not carry the figures out of the results directory
    # the newest ok row per cell and metric, as lengthx.read_results gives it (none yet: the default directory)
    df = read_results(root) if root.is_dir() else store.read()
    written: list[Path] = []
    biases: set[str] = set()  # models whose Figure 1 is drawn (one per model, from its first task's side file)
    for side_path in sorted((root / "stats").glob("*.json")):
        model, task = side_path.stem.split("__", 1)
        side = read_json(side_path, required=("qq",))  # a damaged side file is named and set aside
        if side is None:
            continue
        if "bias" in side and model not in biases:
            biases.add(model)
            written += figure1_bias(side, model, out)
        written += figure2_qq(side, model, task, out)
    if not df.empty:
        for (model, task), _ in df[df["method"] == "stats"].groupby(["model", "task"]):
            written += temperature_figure(df, model, task, out)
    if not df.empty:  # paper B, and temperature vs segmented training (beyond both papers)
        written += figure2_ootb(df, out, _save)
        written += tau_vs_segmented_figure(df, out, _save, store)
        written += ran_figures(df, store, out, _save)  # whatever ran, in no paper's layout
    written += figure3_medians(root / "attention", out, _save)
    written += training_curves(Path(args.runs_dir) if args.runs_dir else RUNS_DIR / root.name, out, _save)
    if not written:
        print(f"no figure inputs in {root}: run 'lengthx stats task=…' (and runs with method=pmax/entropy) first")
    for w in written:
        print(f"wrote {w}")
