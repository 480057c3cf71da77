"""Fault injection: a damaged results store heals or stops with the file, line and fix; bad inputs stop before
any work; a run directory never runs code (docs/results.md).

Every case ends one of two ways: the run repairs what it can (a torn line is set aside into a
``<file>.corrupt-<timestamp>`` side file, its work recomputed, no whole row lost), or it stops with exit
status 2 and one line naming the file, line or key and the fix — never a Python traceback (``--debug`` shows
it), and never a status ``ok`` on wrong work.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import train_overrides

from lengthx.core.store import ResultsStore

LENGTHX = [sys.executable, "-m", "lengthx.cli"]
ROOT = Path(__file__).resolve().parent.parent
MINI_T5 = ROOT / "lengthx" / "checkpoints" / "mini-t5"

pytestmark = pytest.mark.usefixtures("one_thread")


def _limit_memory() -> None:  # a runaway allocation fails fast instead of swapping a shared machine
    resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30))


def _as_at_a_terminal() -> None:
    """A shell that starts a job in the background (CI runners, ``make test &``) leaves SIGINT ignored, and
    the CLI inherits that; a user pressing Ctrl-C at a terminal has the default disposition."""
    _limit_memory()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LENGTHX_DEBUG"}
    return {**env, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", **extra}


def run_command(args: list[str], timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(LENGTHX + args, capture_output=True, text=True, env=_env(**env), timeout=timeout,
                          preexec_fn=_limit_memory)


def _args(model_dir: str, results: Path, n: int = 2, settings: str = "[320,400]", **extra: str) -> list[str]:
    given = {"model.path": model_dir, "model.l_tr": "300", "task.num_examples": str(n), "task.settings": settings,
             "results_dir": str(results), "batch_size": "1", **extra}
    return ["run", "task=passkey", "method=none", *(f"{k}={v}" for k, v in given.items() if v is not None)]


def _user_error(p: subprocess.CompletedProcess, *needles: str) -> str:
    """The one error line of a run that stopped on a user error (exit 2, no traceback, no ``ok`` cell)."""
    out = p.stdout + p.stderr
    assert p.returncode == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    lines = [line for line in p.stderr.splitlines() if line.startswith("lengthx")]
    assert len(lines) == 1, p.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert " ok " not in p.stdout
    return lines[0]


def _latest(results: Path) -> dict[tuple[str, str], float]:
    """value of the newest ``ok`` row per (cell, metric)."""
    df = ResultsStore(results).read()
    ok = df[df["status"] == "ok"].sort_values("timestamp")
    return {(r.cell, r.metric): float(r.value) for r in ok.itertuples()}


@pytest.fixture(scope="module")
def finished(tiny_model_dir, tmp_path_factory) -> Path:
    """Two finished passkey cells (320 and 400 tokens, 2 examples each) in a results directory (a CLI run, so
    the tests that use it are marked slow)."""
    res = tmp_path_factory.mktemp("finished") / "res"
    p = run_command(_args(tiny_model_dir, res))
    assert p.returncode == 0, p.stderr[-3000:]
    return res


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "res"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".hydra", ".results.lock"))
    return dst


# ---- results.csv -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_torn_row_is_set_aside_and_its_cell_recomputed(finished, tiny_model_dir, tmp_path, as_a_process):
    res = _copy(finished, tmp_path)
    csv = res / "results.csv"
    lines = csv.read_bytes().splitlines(keepends=True)
    assert len(lines[-1]) > 150
    with open(csv, "r+b") as fh:  # truncate -s -150: the last row is cut mid-row
        fh.truncate(csv.stat().st_size - 150)
    torn_cell = ResultsStore(finished).read()["cell"].iloc[-1]

    p = as_a_process(["lengthx", *_args(tiny_model_dir, res)])
    assert p.returncode == 0, p.stderr[-3000:]
    sides = list(res.glob("results.csv.corrupt-*"))
    assert len(sides) == 1 and sides[0].read_bytes() == lines[-1][:-150]
    assert sides[0].name in p.stderr and "Traceback" not in p.stderr  # the warning names the side file
    after = csv.read_bytes().splitlines(keepends=True)
    assert lines[-2].count(torn_cell.encode()) == 1  # the torn cell's other row survived the cut …
    assert after[: len(lines) - 2] == lines[:-2]  # … every row of the other cells is kept, byte for byte …
    assert lines[-2] not in after  # … and the torn cell's survivor is replaced, not kept beside its new rows
    assert not ResultsStore(res).read().duplicated(["cell", "config_hash", "metric"]).any()
    status = {line.split()[0]: line.split()[1] for line in p.stdout.splitlines() if line.startswith("mini-t5|")}
    assert status[torn_cell] == "ok" and set(status.values()) == {"ok", "done"}  # only the torn cell reran
    assert _latest(res) == _latest(finished)  # the torn cell has all its rows again, with the same values
    # the store stays appendable: a third cell lands on its own line
    assert as_a_process(["lengthx", *_args(tiny_model_dir, res, settings="[480]")]).returncode == 0
    assert len(_latest(res)) == len(_latest(finished)) + 2


@pytest.mark.slow
def test_deleted_header_stops_before_any_work(finished, tiny_model_dir, tmp_path, as_a_process):
    res = _copy(finished, tmp_path)
    csv = res / "results.csv"
    csv.write_bytes(b"".join(csv.read_bytes().splitlines(keepends=True)[1:]))
    before = {p: p.read_bytes() for p in res.rglob("*") if p.is_file()}
    line = _user_error(as_a_process(["lengthx", *_args(tiny_model_dir, res)]), str(csv), "line 1", "header")
    assert "paper,table,model" in line  # the fix: the header line to put back
    assert {p: p.read_bytes() for p in res.rglob("*") if p.is_file() and p.name != ".results.lock"} == before
    _user_error(as_a_process(["lengthx", "tables", "--results-dir", res, "--out", tmp_path / "t"]), str(csv), "line 1")


@pytest.mark.slow
@pytest.mark.parametrize("garbage", [b"\x00\xff\xfe\x01 garbage bytes\n", b"1,2,three\n"], ids=["binary", "fields"])
def test_garbage_in_the_csv_stops_before_any_work(garbage, finished, tiny_model_dir, tmp_path, as_a_process):
    res = _copy(finished, tmp_path)
    csv = res / "results.csv"
    lines = csv.read_bytes().splitlines(keepends=True)
    csv.write_bytes(b"".join([*lines[:2], garbage, *lines[2:]]))
    records = {p: p.read_bytes() for p in (res / "records").iterdir()}
    line = _user_error(as_a_process(["lengthx", *_args(tiny_model_dir, res)]), str(csv), "line 3")
    assert "sed -i '3d'" in line  # the fix
    assert {p: p.read_bytes() for p in (res / "records").iterdir()} == records
    _user_error(as_a_process(["lengthx", "tables", "--results-dir", res, "--out", tmp_path / "t"]), str(csv), "line 3")


# ---- records and caches ------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["torn", "no-id", "non-utf8"])
def test_a_bad_records_line_is_set_aside_and_its_example_recomputed(kind, finished, tiny_model_dir, tmp_path,
                                                                    as_a_process):
    res = _copy(finished, tmp_path)
    (res / "results.csv").unlink()  # cells not done: their records are read back
    path = sorted((res / "records").glob("*.jsonl"))[0]
    good = path.read_bytes().splitlines(keepends=True)
    bad = {"torn": good[0][: len(good[0]) // 2] + b"\n",
           "no-id": b'{"prompt_hash": "0", "scores": {"accuracy": 100.0}}\n',
           "non-utf8": good[0][:40] + "é".encode()[:1] + b"\n"}[kind]  # a record torn inside a character
    path.write_bytes(bad + b"".join(good[1:]))

    p = as_a_process(["lengthx", *_args(tiny_model_dir, res)])
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout + p.stderr  # the warning is logged by the run's job (Hydra's console log)
    assert f"{path}: line 1" in out and "Traceback" not in out
    sides = list(path.parent.glob(path.name + ".corrupt-*"))
    assert len(sides) == 1 and sides[0].read_bytes() == bad and sides[0].name in out
    kept = path.read_bytes().splitlines(keepends=True)
    assert good[1] in kept  # the good example was not recomputed
    assert sorted(json.loads(x)["id"] for x in kept) == sorted(json.loads(x)["id"] for x in good)
    assert _latest(res) == _latest(finished)


def test_a_bad_calibration_cache_is_set_aside_and_recomputed(tiny_model_dir, tmp_path, caplog):
    from lengthx.config import compose
    from lengthx.core.cells import Cell, method_id
    from lengthx.core.runner import Runner

    cfg = compose(["method=pmax", f"model.path={tiny_model_dir}", "model.l_tr=300", "task.settings=[400]",
                   f"results_dir={tmp_path}", "calibration.num_examples=1"])
    runner = Runner(cfg)
    cell = Cell(cfg.model.name, method_id(cfg.method), "passkey", runner.settings()[0])
    tau, path, cached = runner.aligned_temperature_with_source(cell)
    for damage in ('{"tau": 0.8, "tar', '{"target": 1.0}'):  # invalid JSON; valid JSON without τ
        path.write_text(damage)
        caplog.clear()
        again, again_path, cached = runner.aligned_temperature_with_source(cell)
        assert again == tau and again_path == path and not cached
        assert json.loads(path.read_text())["tau"] == tau
        side = [p for p in path.parent.glob(path.name + ".corrupt-*") if p.read_text() == damage]
        assert len(side) == 1 and str(path) in caplog.text and side[0].name in caplog.text


# ---- one cell key, one length --------------------------------------------------------------------------------
def test_two_lengths_never_share_a_cell_key():
    from lengthx.core.cells import planned_cells
    from lengthx.models.minis import compose_run

    default = planned_cells(compose_run(["task=passkey"]))
    chars = planned_cells(compose_run(["task=passkey", "task.settings=[20000]", "task.unit=chars"]))
    tokens = planned_cells(compose_run(["task=passkey", "task.settings=[20000]", "task.unit=tokens"]))
    assert default[0].setting.label == "20k" and default[0].setting.value != 20000
    keys = [c.key for c in default] + [chars[0].key, tokens[0].key]
    assert len(set(keys)) == len(keys), keys
    lines = planned_cells(compose_run(["task=lines", "task.settings=[200]", "task.unit=tokens"]))
    assert lines[0].key not in {c.key for c in planned_cells(compose_run(["task=lines"]))}  # 200 lines ≠ 200 tokens


# ---- overrides -----------------------------------------------------------------------------------------------
BAD_OVERRIDES = {
    "tau-nan": (["method=fixed", "method.tau=nan"], "method.tau"),
    "tau-inf": (["method=fixed", "method.tau=inf"], "method.tau"),
    "tau-zero": (["method=fixed", "method.tau=0"], "method.tau"),
    "tau-negative": (["method=fixed", "method.tau=-1"], "method.tau"),
    "n-zero": (["task.num_examples=0"], "task.num_examples"),
    "n-negative": (["task.num_examples=-1"], "task.num_examples"),
    "settings-empty": (["task.settings=[]"], "task.settings"),
    "settings-fraction": (["task.settings=[1500.7]"], "task.settings[0]"),
    "settings-text": (["task.settings=[abc]"], "task.settings[0]"),
    "settings-huge": (["task.settings=[1e9]"], "10,000,000"),
    "unknown-key": (["task.num_exmaples=2"], "did you mean task.num_examples"),
}


@pytest.mark.parametrize("case", list(BAD_OVERRIDES))
def test_a_bad_override_stops_before_a_model_loads(case, tiny_model_dir, tmp_path):
    extra, needle = BAD_OVERRIDES[case]
    keys = {o.split("=")[0] for o in extra}
    base = [a for a in _args(tiny_model_dir, tmp_path / "res", n=1, settings="[320]")
            if a.split("=")[0] not in keys | {"method"}]
    p = run_command([*base, *extra], timeout=120)
    _user_error(p, needle)
    assert not (tmp_path / "res").exists()  # nothing was started


@pytest.mark.slow
def test_debug_shows_the_traceback(tiny_model_dir, tmp_path):
    args = [*_args(tiny_model_dir, tmp_path / "res", n=1, settings="[320]"), "task.num_examples=0"]
    args = [a for a in args if a != "task.num_examples=1"]
    for p in (run_command([*args, "--debug"], timeout=120), run_command(args, timeout=120, LENGTHX_DEBUG="1")):
        assert p.returncode != 0 and "Traceback" in p.stderr and "task.num_examples" in p.stderr


# ---- the environment -----------------------------------------------------------------------------------------
@contextmanager
def _read_only(path: Path):
    """``path`` read-only, for root too (``chattr +i``; root ignores permission bits)."""
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("needs chattr +i to make a directory read-only for root")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o555)
        try:
            yield
        finally:
            path.chmod(0o755)


def test_results_dir_that_is_a_file(tiny_model_dir, tmp_path, as_a_process):
    target = tmp_path / "results.txt"
    target.write_text("not a directory")
    _user_error(as_a_process(["lengthx", *_args(tiny_model_dir, target, n=1, settings="[320]")]),
                f"results_dir={target}", "not a directory")


@pytest.mark.parametrize("hydra_dir", [False, True], ids=["default", "hydra-elsewhere"])
def test_read_only_results_dir(hydra_dir, tiny_model_dir, tmp_path, as_a_process):
    res = tmp_path / "ro"
    res.mkdir()
    extra = [f"hydra.run.dir={tmp_path / 'hydra'}"] if hydra_dir else []
    with _read_only(res):
        start = time.time()
        p = as_a_process(["lengthx", *_args(tiny_model_dir, res, n=1, settings="[320]"), *extra])
        _user_error(p, f"results_dir={res}", "not writable")
    assert time.time() - start < 60 and not (tmp_path / "hydra").exists()


@pytest.mark.slow
def test_empty_model_dir(tmp_path, as_a_process):
    empty = tmp_path / "model"
    empty.mkdir()
    _user_error(as_a_process(["lengthx", *_args(str(empty), tmp_path / "res", n=1, settings="[320]")]),
                str(empty), "config.json")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_damaged_shard_is_named(damage, tmp_path, as_a_process):
    import torch
    from transformers import T5ForConditionalGeneration

    model = tmp_path / "mini-t5"
    shutil.copytree(MINI_T5, model)
    for f in model.glob("*.safetensors"):  # re-saved in two shards, whatever layout the shipped one has
        f.unlink()
    T5ForConditionalGeneration.from_pretrained(str(MINI_T5), dtype=torch.float16).save_pretrained(
        str(model), max_shard_size="3MB")
    shard = model / "model-00002-of-00002.safetensors"
    if damage == "truncated":
        with open(shard, "r+b") as fh:
            fh.truncate(shard.stat().st_size // 2)
    else:
        shard.unlink()
    p = as_a_process(["lengthx", "run", "model=mini-t5", f"model.path={model}", "task=passkey", "task.settings=[300]",
                      "task.num_examples=1", f"results_dir={tmp_path / 'res'}"])
    _user_error(p, shard.name, damage)


# ---- Ctrl-C and per-example records -------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_keeps_finished_examples_and_says_how_to_resume(tiny_model_dir, tmp_path, as_a_process):
    res = tmp_path / "res"
    n = 60  # long enough (two cells of 60) that the interrupt lands mid-run on a fast or a loaded machine
    args = _args(tiny_model_dir, res, n=n)
    proc = subprocess.Popen(LENGTHX + args, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_at_a_terminal)
    deadline = time.time() + 180
    while time.time() < deadline:  # interrupt once the run has some, not all, of its examples
        files = sorted((res / "records").glob("*.jsonl")) if (res / "records").exists() else []
        if 2 <= sum(len(f.read_bytes().splitlines()) for f in files) < 2 * n:
            break
        time.sleep(0.05)
    assert proc.poll() is None and time.time() < deadline, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    kept = sum(len(p.read_bytes().splitlines()) for p in (res / "records").glob("*.jsonl"))
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in out + err
    last = re.split(r"[\r\n]", err.strip())[-1]  # after the progress bar's carriage returns
    assert last == f"interrupted; rerun the same command to resume: {kept} of {2 * n} examples kept"
    assert 2 <= kept < 2 * n
    p = as_a_process(["lengthx", *args])  # the resume (the interrupt above is a real process's)
    assert p.returncode == 0, p.stderr[-3000:]
    for f in (res / "records").glob("*.jsonl"):
        ids = [json.loads(x)["id"] for x in f.read_text().splitlines()]
        assert len(ids) == len(set(ids)) == n  # nothing computed twice


def test_long_examples_are_recorded_one_at_a_time(tiny_model_dir, tmp_path):
    """Each example's record is on disk before the next one is generated once a batch would exceed
    ``batch_tokens`` prompt tokens (an interrupt loses at most the example in flight)."""
    import lengthx.core.runner as runner_module
    from lengthx.config import compose
    from lengthx.core.runner import Runner

    cfg = compose(_args(tiny_model_dir, tmp_path, n=3, settings="[320]", batch_size="4", batch_tokens="400")[1:])
    runner = Runner(cfg)
    real, seen = runner_module.generate, []

    def spy(loaded, prompts, *args, **kwargs):
        files = list((tmp_path / "records").glob("*.jsonl")) if (tmp_path / "records").exists() else []
        seen.append((len(prompts), sum(len(p.read_bytes().splitlines()) for p in files)))
        return real(loaded, prompts, *args, **kwargs)

    runner_module.generate = spy
    try:
        assert [s["status"] for s in runner.run()] == ["ok"]
    finally:
        runner_module.generate = real
    assert seen == [(1, 0), (1, 1), (1, 2)]


# ---- training checkpoints ------------------------------------------------------------------------------------
class _Payload:
    """Unpickling this creates a file: the proof that a loader executed code from the run directory."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.mark.slow
def test_a_pickle_planted_in_a_training_checkpoint_is_refused(models, corpus, tmp_path, as_a_process):
    from lengthx.cli.train import compose_train_config
    from lengthx.segmented.loop import train

    ov = train_overrides(models, corpus, tmp_path, method="da", out="run",
                         **{"train.max_steps": 4, "train.save_every": 2})
    stopped = train(compose_train_config([*ov, "train.stop_after_steps=2"]))
    assert stopped.step == 2
    (ck,) = (tmp_path / "run" / "checkpoints").iterdir()
    marker = tmp_path / "pwned"
    planted = ck / "custom_checkpoint_0.pkl"  # the name Accelerate's load_state unpickles
    planted.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(Exception) as exc:  # noqa: PT011 - the message is the contract, checked below
        train(compose_train_config(ov))
    assert not marker.exists(), "the checkpoint ran code"
    assert str(planted) in str(exc.value) and "safetensors" in str(exc.value)
    _user_error(as_a_process(["lengthx", "train", *ov, f"hydra.run.dir={tmp_path / 'hydra'}"]), str(planted))
    assert not marker.exists()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # the planted pickle, read weights-only
def test_an_accelerate_checkpoint_resumes_with_weights_only_loads(tmp_path):
    """Checkpoints in Accelerate's ``save_state`` layout (how lengthx saved them before) still resume, each
    file through the weights-only unpickler; a pickle planted there is refused as well."""
    import torch
    from accelerate import Accelerator
    from conftest import tiny_gpt2

    from lengthx.segmented.checkpoints import CheckpointParts, load_checkpoint
    from lengthx.segmented.loop import TrainerState, WarmupCosine, build_optimizer

    def parts(seed: int) -> CheckpointParts:
        model = tiny_gpt2(seed, attn=None, n_embd=16, n_layer=1, n_head=2, n_positions=16).train()
        optimizer = build_optimizer(model, 1e-2, 0.1, (0.9, 0.95))
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(2, 10))
        accelerator = Accelerator(cpu=True)
        model, optimizer = accelerator.prepare(model, optimizer)
        return CheckpointParts(accelerator, model, optimizer, schedule, TrainerState())

    a = parts(0)
    ids = torch.randint(0, 64, (2, 8))
    a.model(ids, labels=ids).loss.backward()
    a.optimizer.step()
    a.schedule.step()
    a.state.step, a.state.tokens = 1, 16
    a.accelerator.register_for_checkpointing(a.schedule, a.state)
    a.accelerator.save_state(str(tmp_path / "legacy"))
    rng = torch.get_rng_state()

    b = parts(1)
    torch.manual_seed(2)
    load_checkpoint(tmp_path / "legacy", b)
    assert torch.equal(torch.get_rng_state(), rng) and (b.state.step, b.state.tokens) == (1, 16)
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters(), strict=True))
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert sa.keys() == sb.keys() and all(torch.equal(sa[i]["exp_avg"], sb[i]["exp_avg"]) for i in sa)
    assert b.schedule.state_dict()["last_epoch"] == a.schedule.state_dict()["last_epoch"] == 1

    marker = tmp_path / "pwned"
    planted = tmp_path / "legacy" / "custom_checkpoint_1.pkl"
    planted.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(ValueError, match="custom_checkpoint_1.pkl: refusing to load it"):
        load_checkpoint(tmp_path / "legacy", parts(1))
    assert not marker.exists()
