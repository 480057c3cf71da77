"""scripts/train_mini_t5.py (recipe lengthx.minis.retrieval): the lines curriculum's gates, a resumable CPU run, export
and the NO-GO stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lengthx.minis.curriculum import Curriculum

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "train_mini_t5.py"
TINY = ["--device", "cpu", "--d-model", "32", "--d-kv", "8", "--d-ff", "64", "--heads", "4", "--enc-layers", "1",
        "--dec-layers", "1", "--batch-size", "8", "--log-every", "4", "--eval-every", "8", "--eval-n", "2",
        "--final-n", "2", "--final-lengths", "256", "--max-minutes", "0"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _run_apart(out: Path, *extra: str) -> subprocess.CompletedProcess:
    """The script in a process of its own (a fresh interpreter: its own hash seed, nothing imported before)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *TINY, *extra], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture
def _run(as_a_process):
    """``python scripts/train_mini_t5.py --out OUT <TINY> <extra>`` (the script itself, as its own process would
    run it, in this one: conftest ``as_a_process``; one thread, as ``OMP_NUM_THREADS=1`` gives a process); it must
    exit 0. A resume reads back only what the previous run left in OUT."""
    def run(out: Path, *extra: str):
        p = as_a_process([SCRIPT, "--out", out, *TINY, *extra])
        assert p.returncode == 0, p.stderr[-3000:]
        return p

    return run


def test_a_stage_passes_only_with_a_full_window_at_the_gate():
    cur = Curriculum(capacity=3, gate=0.75, window=8, device=torch.device("cpu"))
    ones, at1 = torch.ones(4, dtype=torch.bool), torch.ones(4, dtype=torch.long)
    cur.update(at1, ones)
    assert not cur.advance(10) and cur.stage == 1  # 4 examples < window
    cur.update(torch.tensor([1, 1, 1, 2]), torch.tensor([True, False, False, True]))  # 3 more at stage 1
    cur.update(at1, torch.tensor([True, True, True, False]))
    # 11 at stage 1, 8 exact: 0.727 < 0.75, block closed and restarted
    assert not cur.advance(20) and cur.stage == 1 and float(cur.seen) == 0
    cur.update(torch.full((8,), 1), torch.tensor([True] * 6 + [False] * 2))
    assert cur.advance(30) and cur.stage == 2 and cur.passed == {1: 30}
    for stage in (2, 3):
        cur.update(torch.full((8,), stage), torch.ones(8, dtype=torch.bool))
        assert cur.advance(40 + stage)
    assert cur.full and cur.lines_count > cur.capacity
    cur.update(torch.full((8,), 4), torch.ones(8, dtype=torch.bool))
    assert not cur.advance(50)  # the full stage has no further gate
    restored = Curriculum(capacity=3, gate=0.75, window=8, device=torch.device("cpu"))
    restored.load_state_dict(json.loads(json.dumps(cur.state_dict())))
    assert (restored.stage, restored.passed) == (cur.stage, cur.passed)


@pytest.mark.slow
def test_training_resumes_exports_and_writes_its_curve(tmp_path, _run):
    out = tmp_path / "run"
    _run(out, "--max-steps", "8")
    first = json.loads((out / "curve.json").read_text())
    assert [r["step"] for r in first] == [4, 8]
    p = _run(out, "--max-steps", "12", "--export", str(tmp_path / "ckpt"))
    assert "resumed from" in p.stdout and "at step 8" in p.stdout
    summary = json.loads((tmp_path / "ckpt" / "curve.json").read_text())
    assert [r["step"] for r in summary["curve"]] == [4, 8, 12]
    assert summary["curve"][0] == first[0]  # the resumed run kept the earlier curve
    assert "held_out" in summary["curve"][1] and set(summary["curve"][1]["held_out"]) == {"passkey", "lines", "topics"}
    assert set(summary["final"]) == {"passkey@256", "lines@256", "topics@256"}
    card = (tmp_path / "ckpt" / "README.md").read_text()
    assert "does NOT meet the retrieval bar" in card and f"| lines@256 | {summary['final']['lines@256']:.0f} |" in card
    from transformers import T5ForConditionalGeneration

    model = T5ForConditionalGeneration.from_pretrained(str(tmp_path / "ckpt"))
    assert next(model.parameters()).dtype == torch.float16


@pytest.mark.slow
def test_the_two_line_gate_stops_a_run_that_does_not_pass_it(tmp_path, _run):
    out = tmp_path / "run"
    _run(out, "--max-steps", "1000", "--gate-minutes", "0.0001")
    summary = json.loads((out / "export" / "curve.json").read_text())
    assert summary["stopped"].startswith("NO-GO") and summary["steps"] < 1000 and summary["stage"] <= 2


@pytest.mark.slow
def test_without_lines_no_gate_stops_and_snapshots_are_exported_at_steps(tmp_path, _run):
    """--w-lines 0: the lines gate never stops the run, the card's bar names only the trained tasks, and
    --export-steps leaves a complete fp16 snapshot (card with held-out EM at L_tr) at each step count, once,
    even across a resume; the state is reloaded without unpickling code (weights_only)."""
    out = tmp_path / "run"
    only = ["--w-lines", "0", "--gate-minutes", "0.0001", "--export-steps", "4,10"]
    _run(out, "--max-steps", "6", *only)
    snaps = out / "snapshots"
    assert sorted(p.name for p in snaps.iterdir()) == ["step-00004"]
    first = (snaps / "step-00004" / "model.safetensors").stat().st_mtime_ns
    _run(out, "--max-steps", "12", *only)
    assert sorted(p.name for p in snaps.iterdir()) == ["step-00004", "step-00010"]
    assert (snaps / "step-00004" / "model.safetensors").stat().st_mtime_ns == first  # not exported twice
    summary = json.loads((snaps / "step-00010" / "curve.json").read_text())
    assert summary["stopped"] is None and summary["steps"] == 10
    assert set(summary["final"]) == {"passkey@256", "topics@256"}
    card = (snaps / "step-00010" / "README.md").read_text()
    assert "(passkey >= 95%, topics >= 90%)" in card and "lines not trained" in card
    final = json.loads((out / "export" / "curve.json").read_text())
    assert final["steps"] == 12 and final["stopped"] is None


@pytest.mark.slow
def test_stop_step_retrains_a_snapshot_of_a_longer_run_exactly(tmp_path, _run):
    """--stop-step N with the longer run's --max-steps (its learning-rate schedule) gives the weights of that
    run's step-N snapshot, bit for bit (what `make mini-t5` relies on); --snapshots-to places snapshots."""
    from safetensors.torch import load_file

    common = ["--w-lines", "0", "--max-steps", "12", "--export-steps", "6"]
    _run(tmp_path / "long", *common)
    # the retraining in a process of its own, as `make mini-t5` runs it: the bits do not depend on the process
    _run_apart(tmp_path / "short", *common, "--stop-step", "6", "--snapshots-to", str(tmp_path / "snaps"))
    a = load_file(str(tmp_path / "long" / "snapshots" / "step-00006" / "model.safetensors"))
    b = load_file(str(tmp_path / "snaps" / "step-00006" / "model.safetensors"))
    c = load_file(str(tmp_path / "short" / "export" / "model.safetensors"))
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]) for k in a)
    assert json.loads((tmp_path / "short" / "export" / "curve.json").read_text())["steps"] == 6
    final = load_file(str(tmp_path / "long" / "export" / "model.safetensors"))
    assert not all(torch.equal(a[k], final[k]) for k in a)  # the long run went on
