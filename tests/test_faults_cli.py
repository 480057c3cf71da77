"""The command's answers to a new user's mistakes are one line naming the argument and the fix, exit 2
(docs/results.md, "Errors"): ``--flags`` where ``key=value`` is meant, a ``--results-dir`` that is a file or
does not exist; a reader that stops reading ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import lengthx

LENGTHX = [sys.executable, "-m", "lengthx.cli"]


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "LENGTHX_DEBUG"}, "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1"}


def _one_line(args: list[str], *needles: str, cwd: Path | None = None) -> str:
    p = subprocess.run(LENGTHX + args, capture_output=True, text=True, env=_env(), timeout=300, cwd=cwd)
    assert p.returncode == 2, (p.stdout + p.stderr)[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("lengthx") and "Traceback" not in p.stderr, p.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("args,fix", [
    (["run", "--task", "passkey"], "write task=passkey"),
    (["run", "--task=passkey", "method=none"], "write task=passkey"),
    (["train", "--method", "chunk-0.25"], "write method=chunk-0.25"),
    (["calibrate", "--num-examples", "3"], "write num_examples=3"),
])
def test_a_flag_where_key_value_is_meant_gets_the_key_value_to_write(args, fix, tmp_path):
    """Before: Hydra's "mismatched input '--' expecting EQUAL"."""
    _one_line(args, "key=value", fix, cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_tables_names_a_results_dir_that_is_a_file_or_missing(tmp_path):
    """``--results-dir <results.csv>`` (before: "unexpected NotADirectoryError", exit 1) and, for tables, a
    directory that does not exist (before: created, exit 0; figures may draw training curves into a new one)."""
    csv = tmp_path / "results.csv"
    csv.write_text("paper\n")
    for command in ("tables", "figures"):
        _one_line([command, "--results-dir", str(csv)], "is a file", f"e.g. {tmp_path}")
    missing = tmp_path / "does-not-exist"
    _one_line(["tables", "--results-dir", str(missing)], "does not exist")
    assert not missing.exists()


def test_read_results_names_a_directory_that_does_not_exist(tmp_path):
    """``lengthx.read_results("results/minii")`` (a typo) raised nothing and returned an empty frame."""
    with pytest.raises(FileNotFoundError, match="minii does not exist"):
        lengthx.read_results(tmp_path / "minii")
    assert lengthx.read_results(tmp_path).empty  # a directory with nothing run yet is empty, not an error


def test_a_reader_that_stops_reading_ends_the_command_quietly():
    """``lengthx ls | head -3``: the pipe closes before the listing is written; no "unexpected BrokenPipeError",
    nothing on stderr, a pipe's exit status."""
    proc = subprocess.Popen(LENGTHX + ["ls"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    proc.stdout.close()  # the reader is gone before the command writes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""


def test_a_model_name_too_long_for_a_file_name_is_named(tmp_path):
    """``model.name=<300 characters>`` failed with "[Errno 36] File name too long" when the first record was
    written; now the value is named (shortened) with the limit, before any work."""
    line = _one_line(["run", f"model.name={'m' * 300}", "--dry-run"], "model.name=", "300 characters",
                     "at most 100", cwd=tmp_path)
    assert "m" * 100 not in line
