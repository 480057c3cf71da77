"""scripts/studies/study_mini_t5_counts.py: the first-of-K stand-in's selection rule and study.md rendered from the
committed records (docs/mini-t5-study.md, second study)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "results" / "mini-t5-counts"
KS = (1, 2, 3, 4, 5)


def _script():
    return load_script("scripts/studies/study_mini_t5_counts.py")


def _snapshot(root: Path, seed: int, step: int, passkey: float, topics: float, per_k: tuple[float, ...]) -> None:
    d = root / "snapshots" / f"seed{seed}" / f"step-{step:05d}"
    d.mkdir(parents=True)
    final = {"passkey@256": passkey, "topics@256": topics, **{f"topics-k{k}@256": v for k, v in zip(KS, per_k, strict=True)}}
    (d / "curve.json").write_text(json.dumps({"final": final}))
    (d / "README.md").write_text("card")


def test_the_rule_needs_every_count_and_takes_seed_0_first(tmp_path):
    s = _script()
    _snapshot(tmp_path, 0, 1200, 100, 95, (100, 98, 95, 92, 88))  # K = 5 below 90
    _snapshot(tmp_path, 0, 1800, 100, 93, (100, 97, 95, 93, 91))
    _snapshot(tmp_path, 1, 1200, 100, 99, (100, 100, 99, 99, 98))  # better, but seed 1
    assert s.select(s.snapshots(tmp_path)).name == "seed0/step-01800"
    (tmp_path / "snapshots" / "seed0" / "step-01800" / "README.md").unlink()
    assert s.select(s.snapshots(tmp_path)) is None  # seed 0 may still reach the bar at a later step
    _snapshot(tmp_path, 0, 3200, 100, 80, (100, 90, 85, 80, 70))  # its last snapshot: seed 0 has none at the bar
    assert s.select(s.snapshots(tmp_path)).name == "seed1/step-01200"


def test_the_fallback_takes_the_best_smallest_count_accuracy_at_the_passkey_bar(tmp_path):
    s = _script()
    _snapshot(tmp_path, 0, 1200, 100, 95, (100, 98, 95, 92, 60))
    _snapshot(tmp_path, 0, 1800, 90, 99, (100, 99, 99, 99, 89))  # best counts, passkey below the bar
    _snapshot(tmp_path, 1, 1200, 100, 95, (100, 98, 95, 92, 70))
    _snapshot(tmp_path, 1, 2400, 100, 50, (100, 98, 95, 92, 70))  # a tie with seed 1's earlier one
    assert s.select(s.snapshots(tmp_path)) is None  # neither seed has reached its last step
    _snapshot(tmp_path, 0, 3200, 100, 80, (100, 90, 85, 80, 40))
    _snapshot(tmp_path, 1, 3200, 100, 80, (100, 90, 85, 80, 40))
    picked = s.select(s.snapshots(tmp_path))
    assert picked.name == "seed1/step-01200" and not s.meets_bar(picked)


def test_a_variant_below_the_bar_at_l_tr_is_not_measured_past_it(tmp_path, capsys):
    """The study measures a variant past L_tr only where the card handles its structure at L_tr."""
    import argparse

    s = _script()
    _snapshot(tmp_path, 0, 1200, 100, 95, (100, 98, 80, 92, 91))  # K = 3 below the topics bar
    snap = s.snapshots(tmp_path)[0]
    by_name = {v.name: v for v in s.VARIANTS}
    assert s.handled(snap, by_name["topics K=1"]) and not s.handled(snap, by_name["topics K=3"])
    args = argparse.Namespace(results=str(tmp_path), lengths=[1024], variants=["topics K=3"], examples=2, methods=["none", "pmax"],
                              calibration=1, device="cpu")
    s.measure(snap, args)  # would load the (absent) model were the cell not skipped
    assert "topics K=3 not measured past L_tr (card 80% < 90% at L_tr)" in capsys.readouterr().out
    assert not (tmp_path / snap.name).exists()


def test_a_worker_is_i_of_k_or_one_clear_line(capsys):
    s = _script()
    assert s.worker_spec("1/3") == (1, 3)
    for bad in ("3/3", "x", "-1/2", "1/0"):
        with pytest.raises(SystemExit) as exit_:
            s.main([f"--worker={bad}", "--render-only"])
        assert exit_.value.code == 2 and "is not I/K" in capsys.readouterr().err


def test_the_carry_line_weighs_processes_by_the_cells_pending():
    s = _script()
    line = s.carry_line(ROOT / "results" / "mini-t5-counts", {"seed0/step-01200": 10, "seed1/step-02400": 30, "x": 0})
    assert 'SNAPSHOTS="seed0/step-01200 seed1/step-02400"' in line and 'WORKERS="seed0/step-01200=4 seed1/step-02400=12"' in line
    assert "STUDY_DIR=" in line and s.carry_line(ROOT, {"x": 0}) == "nothing pending"
