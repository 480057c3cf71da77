"""The lookup stand-in's snapshots on records of exactly K lines padded with filler to L_tr (docs/mini-t5-lookup.md,
"The lines study's records"): `lengthx run task=lines task.num_lines=K task.unit=tokens 'task.settings=[L_tr]'`
(lengthx.tasks.lines_records: the K lines at seeded depths in the passkey task's filler sentences), the records the
lines study would compare across lengths and that the GO check asks ≥ 85% of at K = 2 and the largest count.

The stand-in's recipe trains lines records without filler, and its card measures those (lines-n<K>), so this is
the check, at L_tr, of a format the study's long inputs contain. Each snapshot's cells go to one results store per
variant (``<store>/<variant>/``: a finished cell is not run again, a new snapshot runs only its own); ``--out``
writes the table: accuracy with its 95% Wilson interval per snapshot and K.

    .venv/bin/python scripts/studies/lookup_filled.py results/mini-t5-lookup/snapshots/scratch_more/step-* \\
        --counts 2 6 10 11 12 --n 50 --out results/mini-t5-lookup/filled.md
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from lengthx import read_results
from lengthx.cli import main as lengthx_main
from lengthx.report.tables.intervals import wilson_ci

L_TR = 256  # the lookup stand-in's training length (lengthx/conf/mini/lookup.yaml records)
SEED = 600  # a task seed no card, study or diagnosis of the lookup stand-in uses


def run(snapshot: Path, k: int, n: int, store: Path) -> None:
    """K lines at L_tr on ``snapshot`` into ``store`` (the CLI's own run: resumable, refuses bad input)."""
    argv = ["run", "task=lines", "model=hf", f"model.path={snapshot}", f"model.l_tr={L_TR}", "task.format=short",
            f"task.num_lines={k}", f"task.settings=[{L_TR}]", "task.unit=tokens", f"task.num_examples={n}",
            f"task.seed={SEED}", f"results_dir={store}"]
    try:
        lengthx_main(argv)
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise SystemExit(f"lookup_filled: {snapshot} at K={k} failed (exit {stop.code})") from None


def padded(store_dir: Path, snapshot: Path) -> dict[int, tuple[float, int]]:
    """A snapshot's accuracy (%) and record count per K on K lines padded to L_tr at :data:`SEED`, from its
    variant's store under ``store_dir`` (read once); a K whose cell was not run is absent."""
    return by_count(store_dir / snapshot.parent.name, snapshot.name, SEED)


def by_count(store: Path, model: str, seed: int | None = None) -> dict[int, tuple[float, int]]:
    """τ = 1's accuracy (%) and record count per K on K lines at L_tr in ``store`` for ``model`` (at ``seed``, or
    any seed); {} where the store holds none."""
    if not (store / "results.csv").is_file():
        return {}
    res = read_results(store)
    res = res[(res["metric"] == "accuracy") & (res["model"] == model) & (res["method"] == "none")]
    if seed is not None:
        res = res[res["seed"] == seed]
    out = {}
    for setting, value, size in zip(res["setting"], res["value"], res["n"], strict=True):
        k = re.fullmatch(rf"{L_TR}tokens-(\d+)lines", str(setting))
        if k:
            out[int(k[1])] = (float(value), int(size))
    return out


def table(snapshots: list[Path], counts: list[int], store_dir: Path) -> str:
    """One row per snapshot: accuracy [95% interval] at each K, from the stores."""
    rows = ["| snapshot | " + " | ".join(f"{k} lines" for k in counts) + " |", "|---|" + "---|" * len(counts)]
    for snap in snapshots:
        cells, scores = [], padded(store_dir, snap)
        for k in counts:
            if k not in scores:
                cells.append("")
                continue
            value, size = scores[k]
            lo, hi = wilson_ci(round(value * size / 100), size)
            cells.append(f"{value:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}]")
        rows.append(f"| {snap.parent.name}/{snap.name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("snapshots", nargs="+", type=Path)
    p.add_argument("--counts", nargs="+", type=int, default=[2, 6, 10, 11, 12])
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--store", type=Path, default=Path("results/mini-t5-lookup/filled"))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    snapshots = sorted(s for s in args.snapshots if (s / "model.safetensors").is_file())
    if not snapshots:
        raise SystemExit("lookup_filled: no snapshot among the paths (a directory with model.safetensors). Fix: "
                         "name results/mini-t5-lookup/snapshots/<variant>/step-NNNNN")
    for snap in snapshots:
        for k in args.counts:
            run(snap, k, args.n, args.store / snap.parent.name)
    text = table(snapshots, args.counts, args.store)
    print(text)
    if args.out:
        args.out.write_text(
            "# The lookup stand-in on K lines padded with filler to L_tr\n\n"
            f"Written by `scripts/studies/lookup_filled.py` (module doc): `lengthx run task=lines task.num_lines=K "
            f"task.unit=tokens 'task.settings=[{L_TR}]' task.format=short task.seed={SEED}`, {args.n} records per "
            "cell, each holding exactly K lines at seeded depths in the passkey task's filler sentences "
            "(lengthx.tasks.lines_records); accuracy with its 95% Wilson interval. The stores: "
            f"`{args.store}/<variant>/`. The card's `lines-n<K>` (each snapshot's README) is the same count without "
            "filler.\n\n" + text + "\n")


if __name__ == "__main__":
    main()
