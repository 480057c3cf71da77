"""scripts/studies/study_mini_t5.py: the selection rule, and study.md rendered from the committed records
(docs/mini-t5-study.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "results" / "mini-t5-study"


def _script():
    return load_script("scripts/studies/study_mini_t5.py")


def _snapshot(root: Path, seed: int, step: int, passkey: float, topics: float) -> None:
    d = root / "snapshots" / f"seed{seed}" / f"step-{step:05d}"
    d.mkdir(parents=True)
    (d / "curve.json").write_text(json.dumps({"final": {"passkey@256": passkey, "topics@256": topics}}))
    (d / "README.md").write_text("card")


def test_the_selection_rule_picks_seed_0s_earliest_snapshot_at_the_bar(tmp_path):
    s = _script()
    _snapshot(tmp_path, 0, 300, 100, 85)  # topics below 90
    _snapshot(tmp_path, 0, 1300, 96, 90)
    _snapshot(tmp_path, 0, 600, 94, 99)  # passkey below 95
    _snapshot(tmp_path, 1, 450, 100, 100)  # an earlier step, but of seed 1
    (tmp_path / "snapshots" / "seed0" / "step-00100").mkdir()  # no card yet: incomplete, ignored
    assert [x.name for x in s.snapshots(tmp_path)] == ["seed0/step-00300", "seed0/step-00600", "seed0/step-01300",
                                                       "seed1/step-00450"]
    assert s.select(s.snapshots(tmp_path)).name == "seed0/step-01300"
    (tmp_path / "snapshots" / "seed0" / "step-01300" / "README.md").unlink()
    assert s.select(s.snapshots(tmp_path)).name == "seed1/step-00450"


def test_without_a_snapshot_at_the_bar_the_fallback_takes_seed_0s_best_topics_at_the_passkey_bar(tmp_path):
    s = _script()
    assert s.select([]) is None
    _snapshot(tmp_path, 0, 300, 100, 40)
    _snapshot(tmp_path, 0, 800, 94, 80)  # the best topics, but below the passkey bar
    _snapshot(tmp_path, 0, 1300, 97, 66)
    _snapshot(tmp_path, 0, 2600, 100, 66)  # a tie on topics: the earlier snapshot wins
    _snapshot(tmp_path, 1, 450, 100, 89)  # a later seed's better topics do not count
    picked = s.select(s.snapshots(tmp_path))
    assert picked.name == "seed0/step-01300" and not picked.meets_bar()
    assert "fallback" in s._picked(picked.name, s.snapshots(tmp_path))
    _snapshot(tmp_path, 1, 1000, 95, 90)  # once any seed reaches the bar, the bar decides again
    assert s.select(s.snapshots(tmp_path)).name == "seed1/step-01000"


def test_device_agreement_counts_example_by_example(tmp_path):
    """The device-check section compares the records of one cell on two devices: a changed answer (and its
    score) in one store is counted as different, and an example of another cell hash is not compared."""
    import shutil

    s = _script()
    snap = Path("seed0") / "step-01300"
    if not (STUDY / "device-check" / snap).is_dir():
        pytest.skip("no device-check store for seed0/step-01300")
    shutil.copytree(STUDY / snap, tmp_path / snap)
    shutil.copytree(STUDY / "device-check" / snap, tmp_path / "device-check" / snap)
    before = {a["cell"]: a for a in s.device_agreement(tmp_path)}
    cell = "mini-t5|none|passkey|256tokens"
    assert before[cell]["n"] == before[cell]["prompt"] == before[cell]["output"] == before[cell]["score"] > 0

    path = tmp_path / "device-check" / snap / "records" / "mini-t5_none_passkey_256tokens.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0]["output"], lines[0]["scores"] = "wrong", {"accuracy": 0.0}
    lines[1]["config_hash"] = "another"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    after = {a["cell"]: a for a in s.device_agreement(tmp_path)}[cell]
    assert after["n"] == before[cell]["n"] - 1  # the example of another hash is left out
    assert after["prompt"] == after["n"]
    assert after["output"] == after["score"] == before[cell]["n"] - 2  # ... and the changed one counts as different
