"""The results store (docs/results.md, docs/design.md §7): one directory of ``results.csv``, per-example records,
caches and locks. The rest of lengthx reads and writes it through this face alone (``lint-imports`` keeps that);
its modules are named by concern:

- reading and appending under the lock: :class:`ResultsStore` (:mod:`.results`), what a row and a record are
  (:mod:`.schema`), two records of one example (:mod:`.duplicates`), checked writes, side files and JSON caches
  (:mod:`.files`), the mounts a store may live on (:mod:`.mounts`);
- repair of what a kill left (:mod:`.repair`);
- merging a store measured elsewhere (:mod:`.merge`: :func:`merge_store`, :func:`merge_tree`);
- the parsed cache: in a process (:mod:`.cache`) and beside ``results.csv`` for the next one (:mod:`.sidecar`);
- the command that computed each configuration hash (:mod:`.sources`);
- the all-done memo, which answers a run whose every cell is done without loading a model (:mod:`.done_memo`).
"""

from __future__ import annotations

from lengthx.core.provenance import git_commit, now, versions
from lengthx.core.store.cache import file_version
from lengthx.core.store.done_memo import MEMO_DIR, finished_cells, memo_key, remember
from lengthx.core.store.files import (
    StoreError,
    append_bytes,
    make_dirs,
    read_json,
    refuse_link,
    side_file,
    write_atomic,
    write_json,
)
from lengthx.core.store.merge import merge_store, merge_tree, stores_under
from lengthx.core.store.repair import set_aside_torn_tail
from lengthx.core.store.results import STORE_FOLDERS, ResultsStore, first_records, safe_name
from lengthx.core.store.schema import (
    BOM,
    COLUMNS,
    HEADER,
    LEGACY_COLUMNS,
    NUMERIC_COLUMNS,
    SHORT_OF_TARGET,
    STATUSES,
    TEXT_COLUMNS,
    UNALIGNED_MARK,
    csv_problem,
    csv_text,
    parse_rows,
    row_problem,
    temperature_problem,
)
from lengthx.core.store.sources import check_own_name, job_overrides, read_sources, record_sources

__all__ = [
    "BOM", "COLUMNS", "HEADER", "LEGACY_COLUMNS", "MEMO_DIR", "NUMERIC_COLUMNS", "SHORT_OF_TARGET", "STATUSES",
    "STORE_FOLDERS", "TEXT_COLUMNS", "UNALIGNED_MARK", "ResultsStore", "StoreError", "append_bytes",
    "check_own_name", "csv_problem", "csv_text", "file_version", "finished_cells", "first_records", "git_commit",
    "job_overrides", "make_dirs", "memo_key", "merge_store", "merge_tree", "now", "parse_rows", "read_json",
    "read_sources", "record_sources", "refuse_link", "remember", "row_problem", "safe_name", "set_aside_torn_tail",
    "side_file", "stores_under", "temperature_problem", "versions", "write_atomic", "write_json",
]
