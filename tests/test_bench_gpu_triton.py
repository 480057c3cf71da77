"""``scripts/bench/gpu/bench_gpu_triton.py --smoke``: the GPU session's timing script, run end to end at tiny shapes on the
CPU in triton's interpreter (its numbers there are no speeds; the GPU run needs a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # about half a minute: every cell of the script once, interpreted
def test_the_smoke_run_fills_every_section(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "gpu-triton_smoke.md"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "gpu" / "bench_gpu_triton.py"), "--smoke", "--out",
                           str(out)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = json.loads(out.with_suffix(".json").read_text())["cells"]
    correctness = [c for c in cells if c["section"] == 1]
    assert len(correctness) == 8 and all(c["ok"] for c in correctness)
    timed = {(c["section"], c["variant"]) for c in cells if c["section"] in (2, 3) and c.get("time_s", 0) > 0}
    assert len(timed) == 6 + 4, timed
    delta = next(c for c in cells if c.get("variant") == "Δ blocks vs triton")
    assert delta["dpmax"] < 0.05 and delta["dentropy"] < 0.05  # bf16 logits of the blocks against fp32 ones
    text = out.read_text()
    assert "## 1. Correctness" in text and "## 3. The encoder forward" in text and "NO |" not in text
