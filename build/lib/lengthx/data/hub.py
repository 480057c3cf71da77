"""Datasets from the Hugging Face hub or the local ``datasets`` cache (the paper profiles' corpora:
PG19 for paper A §5.1, LCC for paper A §5.4, arXiv ``scientific_papers`` for paper B §4.1).

:func:`load_hub_dataset` is the one place that calls ``datasets.load_dataset`` on a hub name: a failure
to load (offline, no cache, a script-only copy) becomes one message that says what to set instead, and the
fields a task reads are checked before any row is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lengthx.data.jsonl import DataFormatError


def load_hub_dataset(
    name: str, split: str, fields: Sequence[str] = (), hint: str = "", config: str | None = None, **kwargs: Any
) -> Any:
    """``split`` of the dataset ``name`` (``config``: its configuration) as a ``datasets.Dataset``.

    ``kwargs`` go to ``datasets.load_dataset`` (``cache_dir``, ``revision``). Raises RuntimeError ending in
    ``hint`` (the offline alternative) when the dataset cannot be loaded, and :class:`DataFormatError`
    naming the columns when one of ``fields`` is missing.
    """
    import datasets

    where = f"{config}, split {split!r}" if config else f"split {split!r}"
    try:
        ds = datasets.load_dataset(name, config, split=split, **kwargs)
    except Exception as err:  # noqa: BLE001 - turn any loading failure into one actionable message
        raise RuntimeError(f"could not load the dataset {name!r} ({where}) from the hub or the local cache: "
                           f"{type(err).__name__}: {err}. {hint}".rstrip()) from err
    missing = [f for f in fields if f not in ds.column_names]
    if missing:
        raise DataFormatError(f"dataset {name} ({where}): missing field {missing[0]!r}; "
                              f"columns are {ds.column_names}")
    return ds
