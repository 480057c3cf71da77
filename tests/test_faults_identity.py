"""Fault injection, second round: results that are never stale, never silently wrong, and never run foreign code
(docs/results.md, docs/design.md §7).

Every case is a change a user or an attacker can make on disk or on the command line: a checkpoint patched in
place, a task's code changed, a tokenizer swapped, NaN or out-of-range values written into the store, a
symbolic link planted, a second process on the same cell, a bad key that applies to every cell. Each ends with
no ``ok`` row on wrong or stale work, and either the work redone (named by file and line where something was
set aside) or exit status 2 with one line naming the file, line or key and the fix, before any work.
"""

from __future__ import annotations

import json
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from test_faults import _env, run_command

from lengthx.config import compose
from lengthx.core.runner import Runner
from lengthx.core.store import COLUMNS, ResultsStore

LENGTHX = [sys.executable, "-m", "lengthx.cli"]
ROOT = Path(__file__).resolve().parent.parent
CHECKPOINTS = ROOT / "lengthx" / "checkpoints"

pytestmark = pytest.mark.usefixtures("one_thread")


def _overrides(model_dir: str | Path, results: Path, n: int = 2, settings: str = "[320]", **extra: str) -> list[str]:
    given = {"model.path": str(model_dir), "model.l_tr": "300", "task.num_examples": str(n),
             "task.settings": settings, "results_dir": str(results), "batch_size": "1", **extra}
    return ["task=passkey", "method=none", *(f"{k}={v}" for k, v in given.items() if v is not None)]


def _runner(model_dir: str | Path, results: Path, **kw) -> Runner:
    return Runner(compose(_overrides(model_dir, results, **kw)))


def cli(args: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """``lengthx <args>`` in this process: (exit status, stderr)."""
    from lengthx.cli import main

    monkeypatch.delenv("LENGTHX_DEBUG", raising=False)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
    finally:
        signal.signal(signal.SIGTERM, handler)
    return exc.value.code, capsys.readouterr().err


def user_error(status: int, err: str, *needles: str) -> str:
    """The one error line of a command that stopped on a user error (exit 2, no traceback)."""
    assert status == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("lengthx")]
    assert len(lines) == 1, err[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _ok_rows(results: Path) -> pd.DataFrame:
    df = ResultsStore(results).read()
    return df[df["status"] == "ok"]


def _copy_model(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(CHECKPOINTS / name, tmp_path / name))


# ---- 1-3: a cell reported done with a number the current model or code would not give ------------------------
def test_a_shard_changed_in_its_middle_is_a_new_cell(tmp_path):
    """mini-t5 copied, one cell finished; then the middle of a shard is zeroed in place (same size, same first
    and last MiB): the cell is not done any more, and its rerun is a new, ok cell under a new hash."""
    from lengthx.models.loading import weights_fingerprint

    model = _copy_model("mini-t5", tmp_path)
    args = dict(n=1, settings="[300]", **{"model.l_tr": "256"})
    runner = _runner(model, tmp_path / "res", **args)
    assert [s["status"] for s in runner.run()] == ["ok"]
    (cell, before), = runner.cells()
    assert runner.is_done(cell, before)
    shard = max(model.glob("*.safetensors"), key=lambda f: f.stat().st_size)
    size, quick = shard.stat().st_size, weights_fingerprint(str(model))
    assert size > 4 << 20  # the middle lies outside the first and last MiB
    with open(shard, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(bytes(4096))
    assert shard.stat().st_size == size and weights_fingerprint(str(model)) == quick  # the quick stamp misses it

    again = _runner(model, tmp_path / "res", **args)
    (_, after), = again.cells()
    assert after != before and not again.is_done(cell, after)
    assert [s["status"] for s in again.run()] == ["ok"]
    assert set(_ok_rows(tmp_path / "res")["config_hash"]) == {before, after}


def test_the_weights_are_hashed_once_per_file_version(tiny_model_dir, tmp_path):
    """The full hash of the weights is kept by file version in the results directory: a later run takes it from
    there instead of reading the weights again (a checkpoint of tens of GB is hashed once), and a new version
    of the file (rewritten, even to the same bytes) is hashed again."""
    import lengthx.models.loading as loading

    loading.DIGESTS.clear()
    first = _runner(tiny_model_dir, tmp_path).weights
    cache = tmp_path / ".cache" / "digests.json"
    kept = json.loads(cache.read_text())
    shard = Path(tiny_model_dir) / "model.safetensors"
    key, = [k for k in kept if k.startswith(f"{shard.resolve()}|")]
    cache.write_text(json.dumps({**kept, key: "0" * 64}))  # what the cache says is what is used
    loading.DIGESTS.clear()
    assert _runner(tiny_model_dir, tmp_path).weights != first
    shard.write_bytes(shard.read_bytes())  # a new version of the file, with the same content
    loading.DIGESTS.clear()
    assert _runner(tiny_model_dir, tmp_path).weights == first


def test_a_changed_scorer_or_prompt_recomputes_exactly_its_cells(tiny_model_dir, tmp_path, monkeypatch):
    """passkey's scorer changed to return 0, then its question changed: each time the passkey cell is not done
    and reruns (its number what the current code gives), while a lines cell of the same run stays done."""
    import lengthx.tasks.lines as lines_module
    import lengthx.tasks.passkey as passkey_module

    res = tmp_path / "res"
    first = _runner(tiny_model_dir, res)
    lines = Runner(compose([*_overrides(tiny_model_dir, res, settings="[40]"), "task=lines", "task.unit=lines"]))
    for r in (first, lines):
        assert [s["status"] for s in r.run()] == ["ok"]

    monkeypatch.setattr(passkey_module.PasskeyTask, "score", lambda self, output, example: {"accuracy": 0.0})
    scored = _runner(tiny_model_dir, res)
    (cell, chash), = scored.cells()
    assert chash != first.cells()[0][1] and not scored.is_done(cell, chash)
    assert [(s["status"], s["value"]) for s in scored.run()] == [("ok", 0.0)]

    monkeypatch.setattr(passkey_module, "QUESTION", "What is the key? The key is")
    asked = _runner(tiny_model_dir, res)
    assert asked.cells()[0][1] not in (chash, first.cells()[0][1])
    assert [s["status"] for s in asked.run()] == ["ok"]
    lines_again = Runner(compose([*_overrides(tiny_model_dir, res, settings="[40]"), "task=lines",
                                  "task.unit=lines"]))
    assert [s["status"] for s in lines_again.run()] == ["done"]  # another task's code did not change
    monkeypatch.setattr(lines_module.LinesTask, "score", lambda self, output, example: {"accuracy": 0.0})
    assert [s["status"] for s in Runner(lines_again.cfg).run()] == ["ok"]


def test_rows_of_another_code_version_are_flagged(tiny_model_dir, tmp_path, capsys, monkeypatch):
    from lengthx.report.tables.summary import summary_markdown

    res = tmp_path / "res"
    assert [s["status"] for s in _runner(tiny_model_dir, res).run()] == ["ok"]
    df = ResultsStore(res).read()
    mine = str(df["git_commit"].iloc[0])
    assert "†" not in summary_markdown(df, mine)
    flagged = summary_markdown(df, "0000000")
    assert "| 0 (n=2)† |" in flagged and "1 of 1 cells were computed by another version" in flagged
    assert mine.removesuffix("+dirty") in flagged
    csv = res / "results.csv"  # the row as an older checkout wrote it
    csv.write_text(csv.read_text().replace(mine, "1234abc"))
    status = None
    try:
        from lengthx.cli import main

        main(["tables", "--results-dir", str(res)])
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err
    assert status is None and "1234abc" in err and "another version of the code" in err


def test_a_tokenizer_that_does_not_fit_the_embeddings_is_refused(tmp_path, capsys, monkeypatch):
    """mini-t5's weights (8000 embeddings) with mini-gpt2's 4096-entry tokenizer: exit 2 before any work."""
    model = _copy_model("mini-t5", tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(CHECKPOINTS / "mini-gpt2" / name, model / name)
    status, err = cli(["run", *_overrides(model, tmp_path / "res", **{"model.l_tr": "256"})], capsys, monkeypatch)
    user_error(status, err, str(model), "4096 entries", "8000 embeddings", "Fix:")
    assert not (tmp_path / "res").exists()


# ---- 4-6: bad values stored on disk -------------------------------------------------------------------------
def test_a_nan_score_is_never_an_ok_row(tiny_model_dir, tmp_path, monkeypatch):
    import lengthx.tasks.passkey as passkey_module

    res = tmp_path / "res"
    real = passkey_module.PasskeyTask.score
    monkeypatch.setattr(passkey_module.PasskeyTask, "score", lambda self, o, e: {"accuracy": float("nan")})
    summary = _runner(tiny_model_dir, res).run()
    assert [s["status"] for s in summary] == ["error"]
    assert _ok_rows(res).empty and "not a finite number" in ResultsStore(res).read()["message"].iloc[0]
    assert not any(p.read_text().strip() for p in (res / "records").glob("*.jsonl"))  # no NaN record kept
    monkeypatch.setattr(passkey_module.PasskeyTask, "score", real)
    assert [s["status"] for s in _runner(tiny_model_dir, res).run()] == ["ok"]


def test_a_nan_in_results_csv_is_set_aside_and_its_cell_recomputed(tiny_model_dir, tmp_path, caplog):
    res = tmp_path / "res"
    runner = _runner(tiny_model_dir, res)
    runner.run()
    csv = res / "results.csv"
    lines = csv.read_text().splitlines(keepends=True)
    value = COLUMNS.index("value")
    row = lines[1].split(",")
    row[value] = "nan"
    lines[1] = ",".join(row)
    csv.write_text("".join(lines))
    df = ResultsStore(res).read()  # a reader leaves the row out, names it, and reads numbers as numbers
    assert f"{csv}: line 2 has value 'nan'" in caplog.text and len(df) == len(lines) - 2
    assert pd.api.types.is_float_dtype(df["value"])
    assert pd.read_csv(csv)["value"].isna().sum() == 1
    ResultsStore(res).check()  # what `lengthx run` does first
    assert [p.read_text() for p in res.glob("results.csv.corrupt-*")] == [lines[1]]
    assert [s["status"] for s in _runner(tiny_model_dir, res).run()] == ["ok"]
    assert pd.read_csv(csv)["value"].notna().all() and len(_ok_rows(res)) == 2


@pytest.mark.parametrize("tau", [1e300, -1, 0, "abc", [0.9, float("nan")]], ids=["huge", "negative", "zero",
                                                                                  "text", "nan-per-layer"])
def test_a_cached_tau_out_of_range_is_set_aside_and_recomputed(tau, tiny_model_dir, tmp_path, caplog):
    from lengthx.core.cells import Cell, method_id

    cfg = compose(["method=pmax", f"model.path={tiny_model_dir}", "model.l_tr=300", "task.settings=[400]",
                   f"results_dir={tmp_path}", "calibration.num_examples=1"])
    runner = Runner(cfg)
    cell = Cell(cfg.model.name, method_id(cfg.method), "passkey", runner.settings()[0])
    good, path, _ = runner.aligned_temperature_with_source(cell)
    path.write_text(json.dumps({**json.loads(path.read_text()), "tau": tau}))
    again, _, cached = runner.aligned_temperature_with_source(cell)
    assert again == good and not cached and 0 < again <= 1
    side = list(path.parent.glob(path.name + ".corrupt-*"))
    assert len(side) == 1 and str(path) in caplog.text and side[0].name in caplog.text and "tau=" in caplog.text


def test_a_record_without_scores_is_set_aside_and_recomputed(tiny_model_dir, tmp_path, caplog):
    res = tmp_path / "res"
    _runner(tiny_model_dir, res).run()
    (res / "results.csv").unlink()  # the cell is not done: its records are read back
    path, = (res / "records").glob("*.jsonl")
    good = path.read_bytes().splitlines(keepends=True)
    first = json.loads(good[0])
    bad = {k: v for k, v in first.items() if k != "scores"}
    path.write_bytes((json.dumps(bad) + "\n").encode() + good[1])
    assert [s["status"] for s in _runner(tiny_model_dir, res).run()] == ["ok"]
    assert f"{path}: line 1 is not a record (no \"scores\")" in caplog.text
    side, = path.parent.glob(path.name + ".corrupt-*")
    assert json.loads(side.read_text()) == bad
    kept = [json.loads(x) for x in path.read_text().splitlines()]
    assert sorted(r["id"] for r in kept) == sorted(json.loads(x)["id"] for x in good)


def test_repairing_a_torn_row_replaces_the_cells_rows(tiny_model_dir, tmp_path):
    """truncate -s -40 results.csv cuts the tau row of a finished cell; the rerun recomputes the cell and its
    rows replace the survivor: one row per metric under one hash, so a pivot works."""
    res = tmp_path / "res"
    _runner(tiny_model_dir, res, settings="[320,400]").run()
    csv = res / "results.csv"
    with open(csv, "r+b") as fh:
        fh.truncate(csv.stat().st_size - 40)
    summary = _runner(tiny_model_dir, res, settings="[320,400]").run()
    assert [s["status"] for s in summary] == ["done", "ok"]
    ok = _ok_rows(res)
    assert not ok.duplicated(["cell", "config_hash", "metric"]).any() and len(ok) == 4
    ok.pivot(index="cell", columns="metric", values="value")  # raises on a duplicate


# ---- mistakes that apply to every cell stop before any work ---------------------------------------------------
BAD = {
    "dtype": (["dtype=bogus"], "dtype=bogus"),
    "scope": (["method.scope=bogus"], "method.scope=bogus"),
    "settings-bool": (["task.settings=[true]"], "task.settings[0]=true"),
    "unit": (["task.unit=parsecs"], "task.unit=parsecs"),
    "only-empty": (["task.only=[]"], "task.only=[]"),
    "fixed-without-tau": (["method=fixed"], "method.tau=null"),
    "tau-null": (["method=fixed", "method.tau=null"], "method.tau=null"),
    "l_tr-huge": (["model.l_tr=1e8"], "model.l_tr"),
    "n-huge": (["task.num_examples=1e12"], "task.num_examples"),
    "only-unknown": (["task.only=[99k]"], "task.only"),
    "cuda": (["device=cuda"], "device=cuda"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_mistake_for_every_cell_stops_before_any_work(case, tiny_model_dir, tmp_path, capsys, monkeypatch):
    import torch

    if case == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: device=cuda is no mistake here")
    extra, needle = BAD[case]
    keys = {o.split("=")[0] for o in extra}
    base = [o for o in _overrides(tiny_model_dir, tmp_path / "res") if o.split("=")[0] not in keys | {"method"}]
    if case == "only-unknown":
        base = [o for o in base if not o.startswith("task.settings")]
    if case.endswith("-huge"):  # run apart, under a memory limit: a regression would allocate without end
        p = run_command(["run", *base, *extra], timeout=120)
        status, err = p.returncode, p.stderr
    else:
        status, err = cli(["run", *base, *extra], capsys, monkeypatch)
    line = user_error(status, err, needle, "Fix:")
    assert not (tmp_path / "res").exists(), line  # nothing was started


def test_flex_on_heads_below_its_minimum_stops_before_any_work(tmp_path, capsys, monkeypatch):
    """attention.backend=flex on a local T5 with 8-dimensional heads (FlexAttention needs 16): exit 2 with one
    line naming the file and attention.backend=sdpa, before the run writes anything; 16 passes the check."""
    from conftest import byte_tokenizer, tiny_t5

    model = tmp_path / "heads8"
    tiny_t5(attn="sdpa", vocab_size=384).save_pretrained(model)  # d_kv 8
    byte_tokenizer().save_pretrained(model)
    status, err = cli(["run", *_overrides(model, tmp_path / "res"), "attention.backend=flex"], capsys, monkeypatch)
    user_error(status, err, str(model / "config.json"), "d_kv) of 8", "attention.backend=sdpa")
    assert not (tmp_path / "res").exists()
    from lengthx.cli.validate import check_attention_backend

    _with_config(model, d_kv=16)
    check_attention_backend(compose(_overrides(model, tmp_path / "res") + ["attention.backend=flex"]))


def test_a_sweep_checks_every_job_before_the_first_runs(tmp_path, capsys, monkeypatch):
    status, err = cli(["run", "-m", "task.only=[20k],[99k]", "task.num_examples=1", f"results_dir={tmp_path / 'r'}"],
                      capsys, monkeypatch)
    user_error(status, err, "99k", "task.only")
    assert not (tmp_path / "r").exists()


def _with_config(model: Path, **changes) -> None:
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **changes}))


def test_a_checkpoint_whose_shapes_do_not_match_its_config_is_refused(tiny_model_dir, tmp_path, capsys,
                                                                      monkeypatch):
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    _with_config(model, d_ff=128)
    status, err = cli(["run", *_overrides(model, tmp_path / "res")], capsys, monkeypatch)
    user_error(status, err, str(model / "model.safetensors"), "shape", "config.json")
    assert not (tmp_path / "res").exists()


def test_a_gpt2_checkpoint_for_a_t5_model_is_refused(tmp_path, capsys, monkeypatch):
    status, err = cli(["run", *_overrides(CHECKPOINTS / "mini-gpt2", tmp_path / "res", **{"model.l_tr": "256"})],
                      capsys, monkeypatch)
    user_error(status, err, "gpt2 checkpoint", "family t5", "model.path")


def test_a_config_json_that_is_not_json_is_named(tiny_model_dir, tmp_path, capsys, monkeypatch):
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    (model / "config.json").write_text('{"model_type": "t5",')
    status, err = cli(["run", *_overrides(model, tmp_path / "res")], capsys, monkeypatch)
    user_error(status, err, str(model / "config.json"), "not JSON", "line 1")


def _limit_file_size(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


# ---- messages that name the real cause ------------------------------------------------------------------------
def test_a_byte_order_mark_is_named(tiny_model_dir, tmp_path, capsys, monkeypatch):
    res = tmp_path / "res"
    _runner(tiny_model_dir, res).run()
    csv = res / "results.csv"
    csv.write_bytes(b"\xef\xbb\xbf" + csv.read_bytes())
    status, err = cli(["tables", "--results-dir", str(res)], capsys, monkeypatch)
    user_error(status, err, str(csv), "line 1", "byte-order mark", "sed -i")


def test_a_directory_named_results_csv_is_named(tiny_model_dir, tmp_path, capsys, monkeypatch):
    res = tmp_path / "res"
    (res / "results.csv").mkdir(parents=True)
    status, err = cli(["run", *_overrides(tiny_model_dir, res)], capsys, monkeypatch)
    line = user_error(status, err, str(res / "results.csv"), "is a directory", "move it away")
    assert "writable" not in line


def test_a_full_disk_while_hydra_saves_its_config_is_one_line(tiny_model_dir, tmp_path):
    res = tmp_path / "res"
    p = subprocess.run([*LENGTHX, "run", *_overrides(tiny_model_dir, res)], capture_output=True, text=True,
                       env=_env(), timeout=300, preexec_fn=_limit_file_size(256))
    user_error(p.returncode, p.stderr, "Hydra could not write", str(res))
    assert not (res / "results.csv").exists()


@pytest.mark.slow
def test_sigterm_is_handled_like_ctrl_c(tiny_model_dir, tmp_path):
    res = tmp_path / "res"
    n = 60
    args = [*LENGTHX, "run", *_overrides(tiny_model_dir, res, n=n, settings="[320,400]")]
    proc = subprocess.Popen(args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        files = sorted((res / "records").glob("*.jsonl")) if (res / "records").exists() else []
        if 2 <= sum(len(f.read_bytes().splitlines()) for f in files) < 2 * n:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    kept = sum(len(p.read_bytes().splitlines()) for p in (res / "records").glob("*.jsonl"))
    assert proc.returncode == 143 and "Traceback" not in out + err
    last = err.strip().replace("\r", "\n").splitlines()[-1]
    assert last == f"terminated (SIGTERM); rerun the same command to resume: {kept} of {2 * n} examples kept"


def test_tables_out_unwritable_is_one_line(tiny_model_dir, tmp_path, capsys, monkeypatch):
    res = tmp_path / "res"
    _runner(tiny_model_dir, res).run()
    blocked = tmp_path / "file"
    blocked.write_text("a file where a directory is asked for")
    status, err = cli(["tables", "--results-dir", str(res), "--out", str(blocked / "tables")], capsys, monkeypatch)
    user_error(status, err, str(blocked / "tables"), "cannot create")




def test_a_checkpoint_checked_for_its_own_family_is_still_refused_for_another_in_the_same_process(tmp_path, capsys,
                                                                                                  monkeypatch):
    """The check is kept per checkpoint *and* family: a process that ran mini-gpt2 as GPT-2 (an API session, a
    sweep) still refuses it as a T5."""
    from omegaconf import OmegaConf

    from lengthx.models.loading import check_model_dir

    check_model_dir(OmegaConf.create({"name": "gpt2", "path": str(CHECKPOINTS / "mini-gpt2"), "family": "gpt2"}))
    test_a_gpt2_checkpoint_for_a_t5_model_is_refused(tmp_path, capsys, monkeypatch)
