"""Reading results loads no model library (docs/results.md, "At a lab's size"): ``lengthx tables`` and its summary
import neither torch nor transformers, whose import alone costs more than reading a lab's ``results.csv``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READ = """
import sys
from lengthx.cli import main
main(sys.argv[1:])
print("LOADED", sorted(m for m in ("torch", "transformers") if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["tables", "--summary"], ["tables", "--format", "markdown"]])
def test_tables_import_no_model_library(tmp_path, argv):
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(ROOT / "results" / "mini" / "results.csv", results / "results.csv")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", READ, *argv, "--results-dir", str(results)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mini-t5" in proc.stdout
    assert "LOADED []" in proc.stderr, proc.stderr[-2000:]
