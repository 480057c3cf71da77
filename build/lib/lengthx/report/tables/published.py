"""The papers' published tables, shipped inside the package (``lengthx/published/``, its README.md) and read
through :mod:`importlib.resources`, so ``--compare-paper`` and ``lengthx plan`` give the same numbers from a
clone anywhere and from an installed wheel (docs/design.md §7).

There is no other place to read them from: a table that is not there is a broken install, an error naming
the file, never a table rendered without the paper's numbers.
"""

from __future__ import annotations

import csv
import io
from importlib.resources import files
from importlib.resources.abc import Traversable

PAPER_DIR: Traversable = files("lengthx").joinpath("published")


def published_file(relative: str) -> Traversable:
    """The package-data file ``relative`` (``attention-alignment-tables/table3.csv``) under :data:`PAPER_DIR`."""
    return PAPER_DIR.joinpath(*relative.split("/"))


def published_rows(relative: str) -> list[list[str]]:
    """The rows of a published CSV; :class:`FileNotFoundError` naming it when the install lacks it."""
    path = published_file(relative)
    if not path.is_file():
        raise FileNotFoundError(f"the published table {relative} is missing from {PAPER_DIR}: this lengthx install "
                                "is incomplete; reinstall it (pip install lengthx, or pip install -e . in a clone)")
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
