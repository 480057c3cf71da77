"""Checks of committed artifacts and docs (tests/artifacts/README.md): they fail when the committed results,
checkpoints or docs are out of step with the code, not when the code breaks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import in_process

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("one_thread")


def run_command(args: list[str]) -> subprocess.CompletedProcess:
    """``lengthx <args>`` in this process, as its own process would run it (conftest.in_process: what is tested
    is the command's answer, not its process; the imports are paid once)."""
    return in_process(["lengthx", *args], OMP_NUM_THREADS="1")


@pytest.mark.slow  # 25 s in the suite's recorded durations: it composes every recorded command again
def test_the_committed_mini_results_are_current():
    """`lengthx tables --check` on the committed results/mini: every paper A cell the tables show is what the
    current code and shipped checkpoints compute (paper B's cells are unverifiable: they score runs not shipped)."""
    p = run_command(["tables", "--check", "--results-dir", str(ROOT / "results" / "mini")])
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    counts = p.stdout.strip().splitlines()[-1]
    assert ", 0 stale," in counts and not counts.startswith("0 current"), counts
    assert "no record of the command" not in p.stdout  # every paper A cell's command is recorded
