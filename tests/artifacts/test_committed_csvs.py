"""Checks of committed artifacts and docs (tests/artifacts/README.md): they fail when the committed results,
checkpoints or docs are out of step with the code, not when the code breaks."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from lengthx.core.store import COLUMNS

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("one_thread")

# ---- the committed results ------------------------------------------------------------------------------------
def test_every_committed_results_csv_reads_in_pandas():
    files = sorted(ROOT.glob("results/**/results.csv"))
    assert files
    for path in files:
        df = pd.read_csv(path)
        assert list(df.columns) in (COLUMNS, COLUMNS[:-1]), path
        assert pd.api.types.is_float_dtype(df["value"]), path
