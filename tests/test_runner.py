"""The runner end to end through the CLI: rows, resume after kill -9, clear errors (docs/design.md §7)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from lengthx.core.store import ResultsStore

LENGTHX = [sys.executable, "-m", "lengthx.cli"]


@pytest.fixture
def run_command(as_a_process):
    """``lengthx <args>`` run as its own process would run it, in this one (conftest ``as_a_process``): these tests
    check its exit status, output and files, not the process boundary (a kill -9 below is a real process's)."""
    return lambda args: as_a_process(["lengthx", *args])


def _common(model_dir: str, results: Path, n: int = 4) -> list[str]:
    return [f"model.path={model_dir}", "model.l_tr=300", f"task.num_examples={n}", "task.settings=[320,400]",
            f"results_dir={results}", "batch_size=1"]


def _rows(results: Path) -> pd.DataFrame:
    df = ResultsStore(results).read()
    return df.drop(columns=["seconds", "timestamp", "git_commit"]).sort_values(["cell", "metric"]).reset_index(drop=True)


@pytest.mark.slow
def test_run_writes_rows_and_tables(tiny_model_dir, tmp_path, run_command):
    # L_tr = 30 scales the paper's passkey lengths (5405…14865 tokens at L_tr 512) to 317…871 tokens
    res = tmp_path / "res"
    common = [f"model.path={tiny_model_dir}", "model.l_tr=30", "task.num_examples=2", f"results_dir={res}"]
    for method in ("log", "none"):
        p = run_command(["run", "task=passkey", f"method={method}", *common])
        assert p.returncode == 0, p.stderr[-2000:]
    df = ResultsStore(res).read()
    assert set(df["method"]) == {"log", "none"} and (df["status"] == "ok").all()
    acc = df[df["metric"] == "accuracy"]
    assert sorted(acc["setting"]) == sorted(["20k", "30k", "40k", "50k", "55k"] * 2)
    for r in df.itertuples():  # τ = log L_tr / log L_ex with the measured mean length; lengths within 2%
        expected = math.log(30) / math.log(r.L_ex) if r.method == "log" else 1.0
        assert r.tau == pytest.approx(expected) and abs(r.L_ex - r.L_req) / r.L_req < 0.02
    taus = df[df["metric"] == "tau"]
    assert list(taus["value"]) == pytest.approx(list(taus["tau"]), abs=1e-4)
    # rerun is a no-op: no duplicate rows
    p = run_command(["run", "task=passkey", "method=none", *common])
    assert p.returncode == 0 and len(ResultsStore(res).read()) == len(df)
    p = run_command(["tables", "--results-dir", str(res)])
    assert p.returncode == 0, p.stderr
    md = (res / "tables" / "aa_table4.md").read_text().splitlines()
    tex = (res / "tables" / "aa_table4.tex").read_text()
    base = next(line for line in md if line.startswith("| **mini-T5**")).split("|")[1:-1]
    log_row = next(line for line in md if line.startswith("| w/ log")).split("|")[1:-1]
    for row, method in ((base, "none"), (log_row, "log")):
        want = acc[acc["method"] == method].set_index("setting")["value"]
        # each value with its 95% interval over the cell's 2 examples (Wilson: each example right or wrong)
        assert [c.strip().split(" [")[0] for c in row[12:17]] == [f"{want[s]:.0f}" for s in ["20k", "30k", "40k", "50k", "55k"]]
        assert all(" [" in c and c.strip().endswith("]") for c in row[12:17])
    assert r"\toprule" in tex and r"w/ $\log_{L_{ex}} L_{tr}$" in tex and "mini-T5" in tex


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted(tiny_model_dir, tmp_path, run_command):
    args = ["run", "task=passkey", "method=none"]
    clean = tmp_path / "clean"
    assert run_command(args + _common(tiny_model_dir, clean, n=6)).returncode == 0

    killed = tmp_path / "killed"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(LENGTHX + args + _common(tiny_model_dir, killed, n=6), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    records = killed / "records"
    deadline = time.time() + 120
    while time.time() < deadline:  # kill -9 once the first cell has some, not all, examples
        files = sorted(records.glob("*.jsonl")) if records.exists() else []
        if files and 2 <= len(files[0].read_text().splitlines()) < 6:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {f.name: f.read_text().splitlines() for f in records.glob("*.jsonl")}
    assert before and not (killed / "results.csv").exists()

    assert run_command(args + _common(tiny_model_dir, killed, n=6)).returncode == 0
    pd.testing.assert_frame_equal(_rows(clean).drop(columns=["L_tr"]), _rows(killed).drop(columns=["L_tr"]))
    for name, lines in before.items():
        after = (records / name).read_text().splitlines()
        ids = [json.loads(x)["id"] for x in after]
        assert len(ids) == len(set(ids)) == 6  # no example computed twice
        assert after[: len(lines)] == lines  # finished examples kept, not recomputed


@pytest.mark.slow
def test_retrained_weights_at_the_same_path_are_not_counted_as_done(tiny_model_dir, tmp_path, run_command):
    """A finished cell belongs to the weights it scored: new weights at the same path run it again."""
    import shutil

    from transformers import T5ForConditionalGeneration

    model_dir, res = tmp_path / "model", tmp_path / "res"
    shutil.copytree(tiny_model_dir, model_dir)
    args = ["run", "task=passkey", "method=none", *_common(str(model_dir), res, n=2)]
    assert run_command(args).returncode == 0
    first = ResultsStore(res).read()
    assert run_command(args).returncode == 0 and len(ResultsStore(res).read()) == len(first)  # done: skipped

    model = T5ForConditionalGeneration.from_pretrained(model_dir)
    model.lm_head.weight.data.mul_(-1.0)
    model.save_pretrained(model_dir)  # "retrained" in place
    p = run_command(args)
    assert p.returncode == 0, p.stderr[-2000:]
    both = ResultsStore(res).read()
    assert len(both) == 2 * len(first) and both["config_hash"].nunique() == 2 * first["config_hash"].nunique()


@pytest.mark.slow
def test_unknown_names_fail_with_the_valid_list(run_command):
    for arg, group in (("task=pasky", "task"), ("model=nope", "model")):
        p = run_command(["run", arg])
        assert p.returncode != 0
        assert f"unknown {group} '{arg.split('=')[1]}'" in p.stderr
        assert ("passkey" if group == "task" else "flan-t5-xl, flan-t5-xxl") in p.stderr
        assert "Traceback" not in p.stderr + p.stdout


def test_absent_model_names_hub_id_and_path(tmp_path, run_command):
    # the paper profile (the mini profile runs flan-t5-large as its shipped stand-in, mini-t5)
    p = run_command(["run", "model=flan-t5-large", "profile=paper", f"results_dir={tmp_path}"])
    assert p.returncode == 2
    assert "flan-t5-large" in p.stderr and "google/flan-t5-large" in p.stderr and "model.path=" in p.stderr
    assert "Traceback" not in p.stderr


def test_failing_cell_becomes_status_row_and_sweep_continues(tiny_model_dir, tmp_path, run_command):
    # 40 tokens cannot hold the passkey prompt: that cell errors, the 320-token cell still runs
    args = ["run", "task=passkey", "method=none", f"model.path={tiny_model_dir}", "model.l_tr=300",
            "task.num_examples=2", "task.settings=[40,320]", f"results_dir={tmp_path}"]
    p = run_command(args)
    assert p.returncode == 1, p.stderr[-2000:]  # a run whose cells fail does not pass for a success
    assert p.stderr.strip().splitlines()[-1].startswith("lengthx run: 1 cell(s) failed")
    df = ResultsStore(tmp_path).read()
    assert dict(zip(df["setting"], df["status"], strict=True)) == {"40tokens": "error", "320tokens": "ok"}
    assert "requested 40" in df.loc[df["setting"] == "40tokens", "message"].item()
