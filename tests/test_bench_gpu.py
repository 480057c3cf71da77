"""``scripts/bench/gpu/bench_gpu.py --smoke`` on the CPU: a table for each of its four items, numbers wherever the CPU can
run a variant, and the correctness item within its tolerance (the GPU run itself needs a GPU)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench" / "gpu" / "bench_gpu.py"
CPU_VARIANTS = ("stock-sdpa", "lengthx-sdpa", "dense+stats", "lengthx+stats", "lengthx+stats[per-head tiles]")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[dict[str, list[dict[str, str]]], dict]:
    out = tmp_path_factory.mktemp("bench") / "gpu_smoke.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--device", "cpu", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tables(out.read_text()), json.loads(out.with_suffix(".json").read_text())


def tables(text: str) -> dict[str, list[dict[str, str]]]:
    """The first Markdown table under each ``## N.`` heading, as rows keyed by the header's cells."""
    out: dict[str, list[dict[str, str]]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        item = section.split(".", 1)[0]
        lines = [ln for ln in section.splitlines() if ln.startswith("|")]
        if len(lines) < 2:
            out[item] = []
            continue
        head = [c.strip() for c in lines[0].strip("|").split("|")]
        end = next((i for i in range(2, len(lines)) if lines[i].count("|") != lines[0].count("|")), len(lines))
        out[item] = [dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True))
                     for ln in lines[2:end]]
    return out


def number(cell: str) -> float:
    """A cell's leading number (``1.23``, ``4.5e-02``, ``12,345``, ``0.90x``); a ValueError when it has none."""
    match = re.match(r"~?([0-9][0-9,]*\.?[0-9]*(?:e[-+]?[0-9]+)?)", cell)
    if match is None:
        raise ValueError(f"no number in {cell!r}")
    return float(match.group(1).replace(",", ""))


@pytest.mark.slow  # the module runs the whole smoke benchmark once
def test_every_item_has_a_table(smoke):
    tabs, _ = smoke
    assert sorted(tabs) == ["1", "2", "3", "4"]
    assert all(tabs[item] for item in tabs), {k: len(v) for k, v in tabs.items()}


@pytest.mark.slow  # the module runs the whole smoke benchmark once
def test_item1_cpu_variants_have_times_and_flex_is_cuda_only(smoke):
    rows = smoke[0]["1"]
    lengths = sorted({r["L"] for r in rows})
    assert len(lengths) == 2
    for n in lengths:
        by_variant = {r["variant"]: r for r in rows if r["L"] == n}
        for v in CPU_VARIANTS:
            assert number(by_variant[v]["time s"]) > 0, (n, v, by_variant[v])
            assert number(by_variant[v]["runs"]) >= 1
        assert number(by_variant["lengthx-sdpa"]["× stock time"]) > 0
        # statistics captured on the dense bias and on the offset table agree
        pmax = [number(by_variant[v]["S̄ P_max"]) for v in ("dense+stats", "lengthx+stats", "lengthx+stats[per-head tiles]")]
        assert max(pmax) - min(pmax) < 1e-2 and 0 < min(pmax) <= 1
        assert by_variant["lengthx-flex"]["time s"] == "n/a (CUDA only)"
        # the one-pass Triton statistics run on CUDA (or under TRITON_INTERPRET=1) only
        assert by_variant["lengthx+triton"]["time s"] in ("n/a (no triton)", "n/a (CUDA only)")
        assert by_variant["stock-sdpa"]["peak GiB"] == "n/a (CPU)"


@pytest.mark.slow  # the module runs the whole smoke benchmark once
def test_item2_efficient_paths_match_the_explicit_path(smoke):
    rows, raw = smoke[0]["2"], smoke[1]
    checked = 0
    for r in rows:
        if (r["path"] not in ("lengthx-sdpa", "lengthx+stats", "lengthx+stats[blocks]", "stock-sdpa")
                or r["max Δ output"].startswith("n/a")):
            continue
        tol = [float(x) for x in r["tolerance (out / P_max / H)"].split(" / ")]
        assert 0 < number(r["max Δ output"]) <= tol[0], r
        if r["path"].startswith("lengthx+stats"):
            assert number(r["max Δ P_max"]) <= tol[1], r
            assert number(r["max Δ entropy"]) <= tol[2], r
        assert r["within"] == "yes", r
        checked += 1
    # two shapes × two τ for the three lengthx paths, stock at τ = 1 only
    assert checked == 2 * 2 * 3 + 2
    assert {r["shape"] for r in rows} == {"large", "xl"} and {r["τ"] for r in rows} == {"1.0", "0.7"}
    oks = [row["ok"] for c in raw["cells"] if c["item"] == 2 for row in c["rows"] if row.get("ok") is not None]
    assert len(oks) == checked and all(oks)


@pytest.mark.slow  # the module runs the whole smoke benchmark once
def test_item3_and_item4_have_measurements(smoke):
    tabs = smoke[0]
    searches = {(r["search"], r["row stride"]): r for r in tabs["3"]}
    grid, bisect = searches[("grid", "16")], searches[("bisect", "16")]
    assert number(grid["forward passes"]) == 12  # 11 grid points + the reference pass
    assert 2 <= number(bisect["forward passes"]) < 12
    assert number(grid["time s"]) > 0 and number(bisect["time s"]) > 0
    assert number(searches[("one FindS pass", "1")]["time s"]) > 0
    assert searches[("grid", "1")]["how"].startswith("projected")
    methods = {r["method"]: r for r in tabs["4"]}
    assert set(methods) == {"full", "chunk-0.25", "da"}
    assert number(methods["full"]["tokens/seq"]) == 4 * number(methods["chunk-0.25"]["tokens/seq"])
    assert number(methods["chunk-0.25"]["max position"]) > number(methods["da"]["max position"])
    for r in methods.values():
        assert number(r["tokens/s"]) > 0 and number(r["s/step"]) > 0


def test_growth_fit_tells_linear_from_quadratic():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from bench_gpu import loglog_growth
    finally:
        sys.path.remove(str(SCRIPT.parent))
    lengths = (2048, 4096, 8192, 15360)
    linear = loglog_growth([(n, 0.5 + 0.25 * n / 1024) for n in lengths])  # a constant part: log-log < 1
    quadratic = loglog_growth([(n, 0.5 + 3e-8 * n * n) for n in lengths])
    assert linear is not None and quadratic is not None
    assert 0.5 < linear["loglog"] < 1.0 and linear["gib_per_1k"] == pytest.approx(0.25)
    assert linear["marginal_ratio"] == pytest.approx(1.0)
    assert quadratic["marginal_ratio"] == pytest.approx((15360 + 8192) / (8192 + 4096))
    assert loglog_growth([(n, 3e-8 * n * n) for n in lengths])["loglog"] == pytest.approx(2.0)
    assert loglog_growth([(2048, 1.0), (4096, 2.0)])["marginal_ratio"] is None
    assert loglog_growth([(2048, 1.0)]) is None
