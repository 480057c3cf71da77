"""Checks of committed artifacts and docs (tests/artifacts/README.md): they fail when the committed results,
checkpoints or docs are out of step with the code, not when the code breaks."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_mini_t5_study import STUDY, _script

ROOT = Path(__file__).resolve().parents[2]


def test_study_md_is_rendered_from_the_committed_records():
    if not (STUDY / "study.md").is_file():
        pytest.fail("results/mini-t5-study/study.md is missing: run scripts/studies/study_mini_t5.py")
    s = _script()
    text, data = s.study(STUDY, list(s.DEFAULT_LENGTHS))
    assert text == (STUDY / "study.md").read_text()
    assert data["snapshots"], "no measured snapshot"
    for snap in data["snapshots"]:
        for task, cells in snap["tasks"].items():
            for cell in cells.values():
                assert cell["n"] >= 60, (snap["snapshot"], task, cell["n"])
