"""Checks of committed artifacts and docs (tests/artifacts/README.md): they fail when the committed results,
checkpoints or docs are out of step with the code, not when the code breaks."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "results" / "mini"


def test_committed_figures_agree_with_the_committed_tables():
    """Every temperature figure and the τ-vs-segmented figure of results/mini draw the rows and values its table
    prints (lengthx.report.figures.consistency)."""
    from lengthx.core.store import ResultsStore
    from lengthx.report.figures.consistency import disagreements

    df = ResultsStore(RESULTS).read()
    assert disagreements(RESULTS, df) == []
