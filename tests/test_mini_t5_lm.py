"""The mini profile runs T5-LM and CodeT5+ as the shipped mini-t5-lm (its card's numbers are checked in
tests/artifacts/test_shipped_mini_t5_lm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CKPT = ROOT / "lengthx" / "checkpoints" / "mini-t5-lm"

pytestmark = pytest.mark.usefixtures("one_thread")


def test_profile_mini_runs_t5_lm_and_codet5p_as_mini_t5_lm():
    from lengthx.models.minis import compose_run

    for model in ("t5-large-lm", "t5-xl-lm", "t5-xxl-lm", "codet5p-770m-py"):
        cfg = compose_run([f"model={model}"])
        assert Path(cfg.model.path) == CKPT and cfg.model.l_tr == 128 and cfg.model.name == model
