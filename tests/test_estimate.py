"""``lengthx plan --estimate`` (docs/design.md §12): passes counted from the plan, costed only from measured
costs (results/bench/gpu.json), the rest named as unmeasured."""

from __future__ import annotations

import json

import pytest

from lengthx.cli.estimate import estimate_lines, estimate_totals
from lengthx.cli.run import plan_jobs
from lengthx.core.estimate import GPU_COSTS, Costs, cell_estimate, gpu_costs


def test_a_pass_is_costed_from_the_benchmark_or_not_at_all():
    costs = gpu_costs(cells=None)  # gpu.json alone (results/bench/gpu-cells.json, where committed, adds shapes)
    bench = {c["length"]: c["time_s"] for c in json.loads(GPU_COSTS.read_text())["cells"]
             if c["item"] == 1 and c.get("variant") == "lengthx-sdpa" and c.get("status") == "ok"}
    assert costs.seconds("encoder", "xxl", 15360) == pytest.approx(bench[15360])
    assert costs.seconds("encoder", "xxl", 5000) == pytest.approx(bench[8192] * 5000 / 8192)  # next measured length
    assert costs.seconds("encoder", "xxl", 20000) is None  # past the longest measured length
    assert costs.seconds("encoder", "large", 2048) is None  # a shape never timed as a plain encoder pass
    assert costs.seconds("decoder_step", "xxl", 2048) is None


@pytest.fixture(scope="module")
def table4():
    return plan_jobs(["profile=paper", "experiment=aa_table4", "model=flan-t5-large,flan-t5-xxl",
                      "calibration.num_examples=2"], show=False)[1]


def test_algorithm1_calibration_passes_are_counted(table4):
    experiment, cfg, cells, stats = next(j for j in table4 if j[1].model.name == "flan-t5-xxl"
                                         and j[1].method.name == "pmax" and j[1].task.name == "passkey")
    cell = next(c for c in cells if c.setting.label == "55k")
    est = cell_estimate(cfg, cell, stats)
    work = {(w.kind, w.length): w.count for w in est.work}
    assert est.examples == 50 and est.tokens == 50 * 14865  # passkey's paper_l_ex at 55k characters
    assert work[("encoder", 14865)] == 50 and work[("decoder_step", 14865)] == 50 * 10
    assert work[("stats/1", 512)] == 2 and work[("stats/1", 14865)] == 2 * 11  # reference, then 11 τ values


def test_the_paper_estimate_names_its_card_sources_and_what_it_never_measured(table4):
    lines = estimate_lines(table4, "paper", gpu_costs(cells=None))
    text = "\n".join(lines)
    assert "NVIDIA H200" in text and "GPU-hours" in text and "measured encoder: gpu-h200.json" in text
    assert "unmeasured: " in text and "encoder passes of large" in text and "decoder steps (at most) of xxl" in text
    total = estimate_totals(table4, gpu_costs(cells=None))["total"]
    assert total.cells == 2 * 4 * 16 and 0 < total.seconds
    # the measured part is exactly the XXL encoder passes (no decoder or stride-1 statistics cost was measured)
    xxl = sum(50 * gpu_costs(cells=None).seconds("encoder", "xxl", est.tokens // 50)
              for _, cfg, cells, s in table4 if cfg.model.name == "flan-t5-xxl"
              for est in (cell_estimate(cfg, c, s) for c in cells))
    assert total.seconds == pytest.approx(xxl)
    assert estimate_totals(table4, Costs("nothing measured"))["total"].seconds == 0
