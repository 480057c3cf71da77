"""lengthx.minis.ship: the one copy both retrieval stand-in studies ship their picked snapshot with."""

from __future__ import annotations

from pathlib import Path

import pytest

from lengthx.minis.ship import SHIPPED_FILES, ship_snapshot

ROOT = Path(__file__).resolve().parents[1]


def _snapshot(path: Path) -> Path:
    path.mkdir(parents=True)
    for name in SHIPPED_FILES:
        (path / name).write_text(f"{name} of {path.name}")
    (path / "README.md").write_text("# card\n\n")
    return path


def test_ship_replaces_an_earlier_export_and_appends_the_section(tmp_path):
    snap = _snapshot(tmp_path / "step-00300")
    target = tmp_path / "mini-t5"
    target.mkdir()
    for stale in ("model-00001-of-00002.safetensors", "model.safetensors.index.json", "runs.json"):
        (target / stale).write_text("an earlier export")
    ship_snapshot(snap, target, "\n## Selection\n\npicked.\n")
    assert sorted(p.name for p in target.iterdir()) == sorted([*SHIPPED_FILES, "README.md"])
    assert all((target / n).read_text() == f"{n} of step-00300" for n in SHIPPED_FILES)
    assert (target / "README.md").read_text() == "# card\n\n## Selection\n\npicked.\n"


def test_an_incomplete_snapshot_ships_nothing(tmp_path):
    snap = _snapshot(tmp_path / "step-00300")
    (snap / "README.md").unlink()  # a snapshot without its card was interrupted while exporting
    with pytest.raises(FileNotFoundError, match="not a complete snapshot.*README.md"):
        ship_snapshot(snap, tmp_path / "mini-t5", "")
    assert not (tmp_path / "mini-t5").exists()


@pytest.mark.parametrize("study, results", [("study_mini_t5", "mini-t5-study"), ("study_mini_t5_counts", "mini-t5-counts")])
def test_both_studies_ship_their_pick_through_it(tmp_path, study, results):
    """Each study's ``--ship`` copies the committed snapshot its rule picks, byte for byte, card first."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "scripts" / "studies"))
    module = importlib.import_module(study)
    picked = module.ship(ROOT / "results" / results, tmp_path / "mini-t5")
    for name in SHIPPED_FILES:
        assert (tmp_path / "mini-t5" / name).read_bytes() == (picked.path / name).read_bytes(), name
    card = (tmp_path / "mini-t5" / "README.md").read_text()
    assert card.startswith((picked.path / "README.md").read_text().rstrip("\n")) and f"`{picked.name}`" in card
