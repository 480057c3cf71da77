"""Checks of committed artifacts and docs (tests/artifacts/README.md): the lines study on the lookup stand-in
(docs/mini-t5-lines.md, ``results/mini-t5-lines``) is rendered from its committed records, owes no replication, and
every cell it plans on the pick is current with the code and the snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "results" / "mini-t5-lines"
FIX = "run python scripts/studies/study_mini_t5_lines.py (it measures what is missing or stale, then renders)"

pytestmark = pytest.mark.skipif(not (STUDY / "study.md").is_file(), reason="the lines study has not run yet")


@pytest.fixture(scope="module")
def lines():
    s = load_script("scripts/studies/study_mini_t5_lines.py")
    text, data = s.study(STUDY, list(s.DEFAULT_LENGTHS))
    return s, text, data


def test_study_and_headline_are_rendered_from_the_committed_records(lines):
    s, text, data = lines
    assert text == (STUDY / "study.md").read_text(), FIX
    assert s.headline(data["snapshots"]) == (STUDY / "headline.md").read_text(), FIX
    picked, _ = s.select(s.snapshots())
    assert data["picked"] == picked.name and [x["snapshot"] for x in data["snapshots"]] == [picked.name]


def test_every_resolved_difference_past_l_tr_is_replicated(lines):
    s, _, data = lines
    assert s.study_cells.owed(s.DESIGN, data["snapshots"]) == [], FIX


@pytest.mark.slow  # composes every planned cell's config and hashes the snapshot (about 30 s)
def test_every_planned_cell_is_current(lines, one_thread):
    s, _, _ = lines
    picked, _ = s.select(s.snapshots())
    args = s.arguments(s.__doc__, STUDY, s.DESIGN, s.worker_spec, only=False).parse_args([])  # the study's defaults
    assert s.study_cells.pending(s.DESIGN, picked, args) == [], FIX
