"""Checks of committed artifacts and docs (tests/artifacts/README.md): the shipped lookup stand-in
(``lengthx/checkpoints/mini-t5-lookup``) is the snapshot the lookup study's rule picks, the mini profile hands lines
to it, and its GO check holds and is current (docs/mini-t5-lookup.md, "The lines study, fixed" and "A pick that
fails the GO check")."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_script
from test_committed_currency import run_command

from lengthx.minis.ship import SHIPPED_FILES

ROOT = Path(__file__).resolve().parents[2]
CKPT = ROOT / "lengthx" / "checkpoints" / "mini-t5-lookup"
FIX = "ship the pick again: python scripts/studies/study_mini_t5_lines.py --ship lengthx/checkpoints/mini-t5-lookup"

pytestmark = [pytest.mark.skipif(not (CKPT / "config.json").is_file(), reason="no lookup stand-in shipped"),
              pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def pick():
    study = load_script("scripts/studies/study_mini_t5_lines.py")
    picked, why = study.select(study.snapshots())
    assert picked is not None, f"a lookup stand-in is shipped, but the rule picks none: {why}"
    return study, picked


def test_the_shipped_copy_is_the_rule_s_pick(pick):
    study, picked = pick
    for name in SHIPPED_FILES:
        assert (CKPT / name).read_bytes() == (picked.path / name).read_bytes(), f"{name} differs; {FIX}"
    card = (CKPT / "README.md").read_text()
    assert card.startswith("# mini-t5-lookup — meets") and f"Snapshot `{picked.name}`" in card, FIX
    assert study.SHIPPED_AS in card, FIX


def test_the_mini_profile_hands_lines_to_it():
    from lengthx.models.minis import compose_run, task_minis

    assert task_minis("mini-t5") == {"lines": "mini-t5-lookup"}
    lines = compose_run(["task=lines", "model=flan-t5-large"]).model
    assert (Path(lines.path), lines.mini, lines.lines_format) == (CKPT, "mini-t5-lookup", "short")
    topics = compose_run(["task=topics", "model=flan-t5-large"]).model
    assert Path(topics.path) == ROOT / "lengthx" / "checkpoints" / "mini-t5"


@pytest.mark.slow  # loads the stand-in once per count to recompute each cell's hash
def test_its_go_check_holds_and_is_current(pick):
    study, picked = pick
    for k in study.GO_COUNTS:
        value, n = picked.go_check[k]
        assert value >= study.GO_BAR and n >= 40, f"{k} lines: {value}% of {n}"
    p = run_command(["tables", "--check", "--results-dir", str(study.GO_CHECK / picked.name)])
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert p.stdout.strip().splitlines()[-1].startswith(f"{len(picked.go_check)} current, 0 stale"), p.stdout[-2000:]
