"""Temperatures of paper A: log scaling vs the published rows, Propositions 1-2, Algorithm 1's search."""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from lengthx.alignment.algorithm1 import TEMPERATURE_GRID, align_temperature
from lengthx.alignment.propositions import log_temperature, prop1_temperature, prop2_temperature

PAPER = Path(__file__).resolve().parents[1] / "lengthx" / "published" / "attention-alignment-tables"
CONF = Path(__file__).resolve().parents[1] / "lengthx" / "conf"


def test_grid():
    assert TEMPERATURE_GRID[0] == 1.0 and TEMPERATURE_GRID[-1] == 0.5 and len(TEMPERATURE_GRID) == 11


def test_log_temperature_examples():
    assert round(log_temperature(15000, 512), 2) == 0.65
    assert round(log_temperature(2048, 512), 2) == 0.82
    assert log_temperature(300, 512) == 1.0


def _log_row(table: str) -> list[str]:
    rows = list(csv.reader(open(PAPER / table, encoding="utf-8")))
    return [v for v in next(r for r in rows if r[0].startswith("w/ \\log"))[1:] if v]


def _paper_lengths(task: str) -> list[float]:
    return list(OmegaConf.load(CONF / "task" / f"{task}.yaml").paper_l_ex)


@pytest.mark.parametrize("table,l_tr,lengths", [
    ("table8.csv", 512, [1024, 2048, 4096, 8192, 15000]),
    ("table10.csv", 512, [1700, 3300, 5000]),
    ("table11.csv", 768, [1000 * k for k in range(1, 17)]),
])
def test_log_rows_of_tables_8_10_11(table, l_tr, lengths):
    assert [f"{log_temperature(x, l_tr):.2f}" for x in lengths] == [f"{float(v):.2f}" for v in _log_row(table)]


def test_log_row_of_table9_from_task_configs():
    # Table 9's L_ex per setting are the tasks' paper_l_ex (≈14.5k-15.5k at the longest setting)
    lengths = []
    for task in ("topics", "lines", "passkey"):
        path = CONF / "task" / f"{task}.yaml"
        assert path.is_file(), path
        lengths += _paper_lengths(task)
    assert [f"{log_temperature(x, 512):.2f}" for x in lengths] == [f"{float(v):.2f}" for v in _log_row("table9.csv")]


def _fixed_point(a, b, c, tau=1.0):
    for _ in range(10000):
        tau = b / (a + c / tau**2)
    return tau


def test_prop1_solves_the_fixed_point_equation():
    rng = random.Random(0)
    checked = 0
    for _ in range(200):
        l_tr, l_ex = 512, rng.choice([1024, 4096, 15000])
        p_tr, s_tr, s_ex = rng.uniform(0.05, 0.5), rng.uniform(0.5, 3), rng.uniform(0.5, 3)
        tau = prop1_temperature(l_tr, l_ex, p_tr, s_tr, s_ex)
        a = math.log(l_ex) + math.log(p_tr)
        b = math.log(l_tr) + math.log(p_tr) + s_tr**2 / 2
        c = s_ex**2 / 2
        if math.isnan(tau):
            assert b * b - 4 * a * c < 0 or a == 0
            continue
        # the iteration τ ← B/(A + C/τ²) started at 1 converges to the larger (stable) root when a > 0
        if a > 0:
            assert _fixed_point(a, b, c) == pytest.approx(tau, rel=1e-6)
            checked += 1
        assert tau == pytest.approx(b / (a + c / tau**2), rel=1e-9)
    assert checked > 50


def test_prop2_gaussian_entropy_identity():
    """Under Gaussian logits l ~ N(0, σ²), H(softmax(l/τ)) ≈ log L − σ²/(2τ²) (paper A, A.3);
    Prop. 2's τ solves log L_ex − σ_ex²/(2τ²) = log L_tr − σ_tr²/2 and so equalises sampled entropies."""
    g = torch.Generator().manual_seed(0)

    def entropy(length, sigma, tau):
        logits = torch.randn(200, length, generator=g, dtype=torch.float64) * sigma
        return float(torch.special.entr(torch.softmax(logits / tau, -1)).sum(-1).mean())

    for length, sigma, tau in [(512, 1.0, 1.0), (8192, 1.0, 0.8), (4096, 0.6, 0.5)]:
        assert entropy(length, sigma, tau) == pytest.approx(math.log(length) - sigma**2 / (2 * tau**2), abs=0.05)
    l_tr, l_ex, s_tr, s_ex = 512, 1024, 1.0, 1.0
    tau = prop2_temperature(l_tr, l_ex, s_tr, s_ex)
    assert math.log(l_ex) - s_ex**2 / (2 * tau**2) == pytest.approx(math.log(l_tr) - s_tr**2 / 2, abs=1e-12)
    h_tr = entropy(l_tr, s_tr, 1.0)
    assert abs(entropy(l_ex, s_ex, tau) - h_tr) < 0.1 < abs(entropy(l_ex, s_ex, 1.0) - h_tr)


@pytest.mark.parametrize("mode", ["pmax", "entropy"])
def test_grid_and_bisect_pick_the_closest_grid_value(mode):
    rng = random.Random(1)
    agree = 0
    for _ in range(50):
        k = rng.uniform(0.5, 3.0)
        stat = (lambda t, k=k: math.exp(-k * t)) if mode == "pmax" else (lambda t, k=k: k * t)
        target = stat(rng.uniform(0.45, 1.05))
        brute = min(TEMPERATURE_GRID, key=lambda t: (abs(stat(t) - target), -t))
        grid = align_temperature(stat, target, mode, "grid")
        bis = align_temperature(stat, target, mode, "bisect")
        assert grid.tau == brute and grid.forward_passes == 11
        assert bis.forward_passes <= 5
        agree += bis.tau == grid.tau
    assert agree == 50
