"""A parsed copy of ``results.csv`` kept beside it, so that a new process reads a file of a lab's size (hundreds of
thousands of rows) without parsing and checking every row again (docs/results.md).

``<results_dir>/.cache/results.parquet`` holds the frame :meth:`lengthx.core.store.ResultsStore.read` built from
the file, with the digest of the bytes it was built from in its metadata. It is read only when the digest of the
file's bytes now is that one, so the file is always the truth: any change to it (an append, an edit, a repair)
makes the copy stale, and it is rebuilt on the next read; so does another version of pandas or pyarrow. It is
written only for a file whose every row was sound. A cache never stops a command: a copy that cannot be read
(missing, damaged) or written (a read-only directory, a full disk, a link) is skipped, and the CSV is parsed as
before. Parquet carries data only, never code.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any

SIDECAR = Path(".cache") / "results.parquet"
DIGEST_KEY = b"lengthx-results-digest"
FORMAT = "1"  # the frame's layout in the copy; a copy of another layout is not read


def data_digest(data: bytes) -> str:
    """The digest a copy is keyed by: BLAKE2b of the file's bytes (its rows up to the last newline), with the
    versions of pandas and pyarrow that write and read the copy (another version may read it back otherwise)."""
    import pandas as pd
    import pyarrow as pa

    return f"{FORMAT}:{pd.__version__}:{pa.__version__}:{hashlib.blake2b(data, digest_size=20).hexdigest()}"


def _safe(root: Path) -> Path | None:
    """The copy's path in ``root``, or None when ``.cache`` or the copy is a symbolic link (never followed)."""
    path = root / SIDECAR
    if os.path.islink(path.parent) or os.path.islink(path):
        return None
    return path


def load_copy(root: Path, digest: str) -> Any | None:
    """The frame kept for the file whose bytes have ``digest``, or None (no copy, another digest, unreadable)."""
    path = _safe(root)
    if path is None or not path.is_file():
        return None
    try:
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(path)
        if (parquet.schema_arrow.metadata or {}).get(DIGEST_KEY) != digest.encode():
            return None
        return parquet.read().to_pandas()
    except Exception:  # noqa: BLE001 - a damaged or foreign copy: parse the CSV instead
        return None


def save_copy(root: Path, digest: str, frame: Any) -> None:
    """Keep ``frame`` as the parsed copy of the file whose bytes have ``digest``; nothing when it cannot be."""
    path = _safe(root)
    if path is None or not root.is_dir():
        return
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), DIGEST_KEY: digest.encode()})
        path.parent.mkdir(exist_ok=True)
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - a cache: the CSV stays the truth
        with contextlib.suppress(OSError):
            tmp.unlink()
