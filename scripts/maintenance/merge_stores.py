#!/usr/bin/env python
"""Merge the results stores a lent GPU's call returned into the stores here (docs/gpu.md, "Merging a GPU call's
stores back"; the rules: lengthx.core.store.merge).

``SOURCE`` is the call's ``study.tar.gz`` (scripts/gpu_runs/gpu_study.sh packs it) or a folder; every store below it
(``seed<S>/step-<N>/``, and its ``replication/``) is merged into the same place below ``TARGET``:

    python scripts/maintenance/merge_stores.py /work/.device/…/study.tar.gz results/mini-t5-counts
    python scripts/studies/study_mini_t5_counts.py --render-only     # then the tables from the merged records
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lengthx.core.store import (  # noqa: E402
    StoreError,  # noqa: E402
    merge_tree,
    stores_under,
)


def merge(source: Path, target: Path) -> int:
    """Merge every store of ``source`` (a folder) into ``target``; prints a line per store, returns the cells added."""
    if not stores_under(source):
        raise SystemExit(f"error: {source} holds no results store (no results.csv or records/ below it). Fix: pass "
                         "the call's study.tar.gz or the folder it was unpacked into")
    added = 0
    for rel, report in merge_tree(source, target).items():
        print(f"{target / rel}: {report.line()}", flush=True)
        added += report.cells
    return added


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path, help="study.tar.gz of a call, or a folder of stores")
    p.add_argument("target", type=Path, help="the study's results folder here, e.g. results/mini-t5-counts")
    args = p.parse_args(argv)
    if not args.source.exists():
        print(f"error: {args.source} does not exist. Fix: pass the call's study.tar.gz (under its files_at)",
              file=sys.stderr)
        return 2
    if not args.target.is_dir():
        print(f"error: {args.target} is not a folder. Fix: pass the study's results folder, e.g. "
              "results/mini-t5-counts", file=sys.stderr)
        return 2
    try:
        if args.source.is_dir():
            added = merge(args.source, args.target)
        else:
            with tempfile.TemporaryDirectory(prefix="merge-stores-") as tmp:
                try:
                    with tarfile.open(args.source) as tar:
                        tar.extractall(tmp, filter="data")
                except (tarfile.TarError, OSError) as err:
                    print(f"error: {args.source} is not a readable tar archive ({err}). Fix: pass the call's "
                          "study.tar.gz or a folder", file=sys.stderr)
                    return 2
                added = merge(Path(tmp), args.target)
    except StoreError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SystemExit as err:
        print(err, file=sys.stderr)
        return 2
    print(f"{added} cells added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
