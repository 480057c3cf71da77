"""Rows of a results DataFrame as Python tuples, at the speed a store of 200,000 rows needs (docs/results.md,
"Scale").

``DataFrame.itertuples`` walks a pyarrow-backed string column (pandas' default for text) one element at a time
through Python, which dominates the summary and the tables at a lab's size; ``Series.tolist`` converts each
column once, in C. :func:`rows` gives the same named tuples as ``itertuples(index=False)``.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import pandas as pd


def finite_number(value: object) -> float | None:
    """A finite number of a results row's field (text or a number in the store), or None (empty, NaN, inf, not a
    number, pandas' NA): ``pd.to_numeric`` of one value, without its cost at a lab's ~10^5 cells."""
    if value is None or value is pd.NA:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def rows(df: pd.DataFrame, columns: Sequence[str] | None = None) -> list[Any]:
    """The rows of ``df`` (its ``columns``, default all) as named tuples, like ``df.itertuples(index=False)``."""
    names = list(df.columns if columns is None else columns)
    Row = namedtuple("Row", names, rename=True)  # type: ignore[misc]  # noqa: PYI024 - names known at run time
    return [Row(*values) for values in zip(*(df[name].tolist() for name in names), strict=True)] if len(df) else []
