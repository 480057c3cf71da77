"""The shipped mini-t5-lm (the mini profile's T5-LM / CodeT5+ stand-in) is what its model card says.

The card's held-out numbers at L_tr were measured by ``scripts/train_mini_t5_lm.py`` (:mod:`lengthx.minis.t5_lm_card`) with the harness's own
``lm`` and ``code_completion`` tasks on the exported fp16 weights; here they are measured again from the
shipped files, on the same held-out examples, and must agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CKPT = ROOT / "lengthx" / "checkpoints" / "mini-t5-lm"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def meta() -> dict:
    return json.loads((CKPT / "lengthx_mini.json").read_text())


def test_profile_mini_runs_t5_lm_and_codet5p_as_mini_t5_lm():
    from lengthx.models.minis import compose_run

    for model in ("t5-large-lm", "t5-xl-lm", "t5-xxl-lm", "codet5p-770m-py"):
        cfg = compose_run([f"model={model}"])
        assert Path(cfg.model.path) == CKPT and cfg.model.l_tr == 128 and cfg.model.name == model
