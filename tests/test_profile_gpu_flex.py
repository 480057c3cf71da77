"""``scripts/bench/gpu/profile_gpu_flex.py --smoke`` (docs/gpu.md, "Why not FlexAttention"): the profile's rows on the CPU,
where FlexAttention is left out unless asked for."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts" / "bench" / "gpu"), str(ROOT / "scripts" / "bench")]

import profile_gpu_flex  # noqa: E402


def test_smoke_profiles_the_sdpa_calls_and_names_the_flex_rows_it_skips(tmp_path):
    out = tmp_path / "gpu-flex.md"
    assert profile_gpu_flex.main(["--smoke", "--out", str(out)]) == 0
    cells = {c["variant"]: c for c in json.loads(out.with_suffix(".json").read_text())["cells"]}
    assert list(cells) == list(profile_gpu_flex.VARIANTS)
    for name in ("sdpa-view", "sdpa-nobias"):
        c = cells[name]
        assert c["status"] == "ok" and c["time_s"] > 0 and c["recompiled"] == 0 and c["top"]
        assert "scaled_dot_product" in " ".join(t["name"] for t in c["top"])  # the profiler saw the attention op
    assert cells["flex"]["status"].startswith("n/a") and cells["flex-nobias"]["status"].startswith("n/a")
    text = out.read_text()
    assert "| 64 | sdpa-view |" in text and "1.00x" in text



@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the full profile runs (minutes): not a smoke test")
def test_without_cuda_the_full_profile_is_one_line_and_exit_2(tmp_path, capsys):
    assert profile_gpu_flex.main(["--out", str(tmp_path / "x.md")]) == 2
    assert capsys.readouterr().err.strip() == "error: no CUDA device. Fix: run on a GPU, or --smoke"
    assert not (tmp_path / "x.md").exists()
