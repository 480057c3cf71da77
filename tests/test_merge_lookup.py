"""scripts/maintenance/merge_lookup.py (docs/gpu.md, "The lookup study on a GPU"): a GPU call's resume points are
merged only where they are further on, the older local state is moved aside, never over a running trainer, and
returned snapshots get the shipped tokenizer back."""

from __future__ import annotations

import os
import tarfile
import time
from pathlib import Path

import pytest
import torch
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return load_script("scripts/maintenance/merge_lookup.py")


def _point(path: Path, step: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state": {"step": step}, "model": {"w": torch.zeros(2, dtype=torch.float16)}}, path)
    (path.parent / "curve.json").write_text(f'[{{"step": {step}}}]')


def _archive(tmp_path: Path, steps: dict[str, int]) -> Path:
    call = tmp_path / "call"
    for variant, step in steps.items():
        _point(call / "train" / variant / "resume.pt", step)
    snap = call / "snapshots" / "warm" / "step-02000"
    snap.mkdir(parents=True)
    (snap / "README.md").write_text("# card")
    with tarfile.open(tmp_path / "lookup.tar.gz", "w:gz") as tar:
        tar.add(call, arcname=".")
    return tmp_path / "lookup.tar.gz"


def test_a_call_further_on_replaces_the_resume_point_and_moves_the_old_state_aside(tmp_path):
    m = _script()
    study = tmp_path / "study"
    _point(study / "train" / "warm" / "state.pt", 100)
    _point(study / "train" / "pieces" / "resume.pt", 900)
    old = time.time() - 3600
    os.utime(study / "train" / "warm" / "state.pt", (old, old))
    lines = m.merge(_archive(tmp_path, {"warm": 500, "pieces": 800}), study)
    assert "warm: step 100 -> 500" in lines and any("pieces: the call's step 800 is not past" in x for x in lines)
    assert m.step_of(study / "train" / "warm") == 500 and (study / "train" / "warm" / "state.pt.before-100").is_file()
    assert m.step_of(study / "train" / "pieces") == 900  # never backwards
    snap = study / "snapshots" / "warm" / "step-02000"
    assert (snap / "README.md").is_file() and (snap / "tokenizer.json").is_file()
    assert m.merge(tmp_path / "lookup.tar.gz", study) == ["pieces: the call's step 800 is not past this checkout's 900; "
                                                          "kept this checkout's", "warm: the call's step 500 is not "
                                                          "past this checkout's 500; kept this checkout's"]


def test_a_variant_whose_trainer_is_running_here_is_refused(tmp_path):
    m = _script()
    study = tmp_path / "study"
    _point(study / "train" / "warm" / "state.pt", 100)  # written just now: a trainer is running
    with pytest.raises(SystemExit, match="a trainer is running on warm here"):
        m.merge(_archive(tmp_path, {"warm": 500}), study)
    assert m.step_of(study / "train" / "warm") == 100
