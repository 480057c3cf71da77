"""``lengthx train-mini`` (lengthx.minis.recipes, lengthx/conf/mini/): the shipped recipes as configs, each the
command its shipped checkpoint's card records; a short run of each from the CLI trains, resumes and ends on the
weights the trainer's script gives with the same options."""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lengthx.minis.recipes import RECIPES_DIR, compose_recipe, to_argv

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "lengthx" / "checkpoints"
TINY = {  # a short run of each trainer: small shapes, few examples, no held-out sets to speak of
    "retrieval": ["d_model=32", "d_kv=8", "d_ff=64", "heads=4", "enc_layers=1", "dec_layers=1", "batch_size=4",
                  "eval_every=1000", "eval_n=2", "final_n=2", "card_counts=''", "card_lines=''", "export_steps=''",
                  "max_steps=6"],
    "t5_lm": ["d_model=32", "heads=4", "d_ff=64", "enc_layers=1", "dec_layers=1", "batch_size=4", "steps=3",
              "warmup=2", "log_every=1", "save_every=1", "snapshots=''", "card_examples=2"],
    "decoders": ["families=[gpt2]", "steps=3", "width=32", "layers=1", "heads=2", "batch_size=2", "eval_sequences=4",
                 "log_every=1"],
}

pytestmark = pytest.mark.usefixtures("one_thread")


def _recipes() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def test_help_lists_every_recipe_and_a_recipes_keys(as_a_process):
    p = as_a_process(["lengthx", "train-mini", "--help"])
    assert p.returncode == 0
    assert _recipes() and all(f"  {name} " in p.stdout for name in _recipes())
    p = as_a_process(["lengthx", "train-mini", "recipe=lookup", "--help"])
    assert p.returncode == 0 and "max_steps            [20000]" in p.stdout and "portable_state" in p.stdout


@pytest.mark.parametrize("argv, named", [
    (["recipe=nope"], "no such recipe"), (["recipe=lookup", "sed=3"], "'sed=3' is not KEY=VALUE"),
    (["recipe=lookup", "seed=abc"], "seed: invalid int value: 'abc'"), (["seed=1"], "name a recipe"),
    (["recipe=lookup", "init_from=nowhere/step-20000"], "init_from: nowhere/step-20000: no checkpoint there"),
    (["recipe=lookup", "lookup_forms=[one-piece,benchmark]", "lines_records=ids"], "needs --lines-records lookup")])
def test_a_mistake_is_one_line_and_exit_2_before_any_work(tmp_path, as_a_process, argv, named):
    p = as_a_process(["lengthx", "train-mini", *argv, f"out={tmp_path / 'run'}"], cwd=tmp_path)
    assert p.returncode == 2 and named in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "run").exists()


def _card_options(name: str) -> list[str]:
    meta = CHECKPOINTS / name / "lengthx_mini.json"
    command = json.loads(meta.read_text())["command"] if meta.is_file() else \
        json.loads((CHECKPOINTS / name / "curve.json").read_text())["command"]
    return shlex.split(command)[2:]


@pytest.mark.parametrize("recipe, shipped, overrides", [
    ("first_of_k", "mini-t5", ["out=results/mini-t5-counts/train/seed0",
                               "snapshots_to=results/mini-t5-counts/snapshots/seed0"]),
    ("t5_lm", "mini-t5-lm", ["export=lengthx/checkpoints/mini-t5-lm"]),
    ("decoders", "mini-pythia", ["families=[pythia]", "quiet=true", "work=null",  # null: the script's default
                                 "out=null", "summary=null"]),
])
def test_a_shipped_recipe_is_the_command_its_checkpoints_card_records(recipe, shipped, overrides):
    import importlib

    trainer, cfg = compose_recipe(recipe, overrides)
    module = importlib.import_module({"retrieval": "lengthx.minis.retrieval_args"}.get(trainer, f"lengthx.minis.{trainer}"))
    ours, theirs = vars(module.parse_args(to_argv(trainer, cfg))), vars(module.parse_args(_card_options(shipped)))
    differ = {k: (ours[k], theirs[k]) for k in ours if k != "argv" and ours[k] != theirs[k]}
    assert not differ


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}


def _run(as_a_process, recipe: str, out: Path, *extra: str) -> str:
    """``lengthx train-mini recipe=RECIPE <tiny> seed=1 <extra>`` writing under ``out``; its stdout."""
    trainer, _ = compose_recipe(recipe, [])
    outs = ([f"work={out}", f"out={out}-out", f"summary={out}-out.md"] if trainer == "decoders" else
            [f"out={out}", f"snapshots_to={out}-snapshots"] if trainer == "retrieval" else [f"out={out}"])
    p = as_a_process(["lengthx", "train-mini", f"recipe={recipe}", *TINY[trainer], "seed=1", *outs, *extra])
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def _stop_early(trainer: str) -> list[str]:
    """Options that stop a run before its last step, its schedule unchanged."""
    return {"retrieval": ["stop_step=2"], "t5_lm": ["max_minutes=1e-9"], "decoders": ["stop_step=2"]}[trainer]


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["first_of_k", "t5_lm", "decoders"])
def test_a_recipe_from_the_cli_stopped_and_resumed_ends_on_its_scripts_weights(tmp_path, as_a_process, recipe):
    """One shipped recipe per trainer: stopped early and rerun from the CLI, then the trainer's own script with the
    options the CLI printed, uninterrupted: the same weights."""
    trainer, _ = compose_recipe(recipe, [])
    _run(as_a_process, recipe, tmp_path / "cli", *_stop_early(trainer))
    out = _run(as_a_process, recipe, tmp_path / "cli")
    assert "resumed from" in out
    printed = next(ln for ln in out.splitlines() if ln.startswith(f"lengthx train-mini recipe={recipe}: python"))
    script, *argv = shlex.split(printed.split(": python ", 1)[1])
    q = as_a_process([str(ROOT / script), *[a.replace(str(tmp_path / "cli"), str(tmp_path / "script")) for a in argv]])
    assert q.returncode == 0, q.stderr[-2000:]
    if trainer == "retrieval":
        a, b = _weights(tmp_path / "cli" / "export"), _weights(tmp_path / "script" / "export")
    elif trainer == "t5_lm":
        a = torch.load(tmp_path / "cli" / "state.pt", weights_only=True)["model"]
        b = torch.load(tmp_path / "script" / "state.pt", weights_only=True)["model"]
    else:
        a, b = _weights(tmp_path / "cli-out" / "mini-gpt2"), _weights(tmp_path / "script-out" / "mini-gpt2")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["retrieval_study", "lookup", "lookup_pieces", "lookup_fill"])
def test_the_other_recipes_train_from_the_cli_and_resume(tmp_path, as_a_process, recipe):
    tiny = ["init_from=null"]  # the tiny shapes are not the shipped mini-t5's that P starts from
    _run(as_a_process, recipe, tmp_path / "cli", "stop_step=2", *tiny)
    assert "resumed from" in _run(as_a_process, recipe, tmp_path / "cli", *tiny)
    card = (tmp_path / "cli" / "export" / "README.md").read_text()  # trained to its end, exported with its card
    if recipe == "lookup_fill":  # its padded records in training and its card's padded counts
        assert "of the records padded with the passkey task's filler" in card
        assert all(f"| lines-fill-n{k}@" in card for k in (2, 6, 11)), card


@pytest.mark.slow
def test_sigterm_saves_the_step_under_way_exits_143_and_a_rerun_resumes_there(tmp_path, as_a_process):
    """SIGTERM (``timeout``, ``kill``, a scheduler) to ``lengthx train-mini`` past its last periodic save: the loop
    ends the step under way, saves it and exits 143 with the CLI's line; nothing since the periodic save is lost."""
    out, save_every = tmp_path / "run", 10
    argv = ["train-mini", "recipe=t5_lm", *[a for a in TINY["t5_lm"] if not a.startswith(("steps=", "save_every="))],
            "steps=100000", f"save_every={save_every}", "seed=1", f"out={out}"]
    env = {**{k: v for k, v in os.environ.items() if k != "LENGTHX_DEBUG"}, "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-u", "-m", "lengthx.cli", *argv], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: any(lines.put(ln) for ln in proc.stdout), daemon=True)
    reader.start()
    seen, logged, deadline = [], 0, time.time() + 120
    try:
        while logged < save_every + 3:  # a few steps past the first periodic save (step 10)
            try:
                seen.append(lines.get(timeout=max(0.0, deadline - time.time())))
            except queue.Empty:
                pytest.fail("no step 13 within 120 s: " + "".join(seen)[-2000:])
            if m := re.search(r"\] step (\d+)/100000", seen[-1]):
                logged = int(m.group(1))
            assert proc.poll() is None or not lines.empty(), "".join(seen)[-2000:]
        assert (out / "state.pt").is_file()  # the periodic save at step 10
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    reader.join(timeout=10)  # its last lines
    while not lines.empty():
        seen.append(lines.get())
    text = "".join(seen)
    assert proc.returncode == 143, text[-2000:]
    assert text.rstrip().endswith("terminated (SIGTERM); rerun the same command to resume"), text[-2000:]
    assert "Traceback" not in text
    state = torch.load(out / "state.pt", weights_only=True)["state"]
    assert state["step"] >= logged > save_every, (state["step"], logged)  # not lost: step 10's save is not the last
    assert json.loads((out / "curve.json").read_text())[-1]["step"] == state["step"]
    p = as_a_process(["lengthx", *argv, "max_minutes=1e-9"])  # the rerun: resumes, trains no step (minutes spent)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"resumed from {out / 'state.pt'} at step {state['step']} " in p.stdout, p.stdout[-2000:]


LOOKUP_VARIANTS = {  # docs/mini-t5-lookup.md, the lookup stand-in's variants: their start and record forms
    "warm": ["init_from=lengthx/checkpoints/mini-t5", "lookup_forms=[benchmark]"],
    "pieces": ["init_from=lengthx/checkpoints/mini-t5", "lookup_forms=[one-piece,benchmark]"],
    "scratch": ["lookup_forms=[benchmark]"],
    "pieces_more": ["seed=1", "init_from=results/mini-t5-lookup/snapshots/pieces/step-20000", "lr=0.0003",
                    "lookup_forms=[one-piece,benchmark]"],
    "scratch_more": ["seed=1", "init_from=results/mini-t5-lookup/snapshots/scratch/step-20000",
                     "lookup_forms=[benchmark]"],
    "fill": ["seed=2", "init_from=results/mini-t5-lookup/snapshots/scratch_more/step-08000",
             "lookup_forms=[benchmark]", "lines_fill=0.5", "card_fill_lines='2,6,11'"],
}


@pytest.mark.parametrize("variant", sorted(LOOKUP_VARIANTS))
def test_a_lookup_variants_recipe_is_the_lookup_recipe_with_its_start_forms_and_folders(variant):
    """Each variant of the lookup study is a recipe on ``lookup`` (Hydra's defaults list): the same trainer command
    as ``recipe=lookup`` with the variant's options and the study's folders, and what its Makefile target runs."""
    where = [f"out=results/mini-t5-lookup/train/{variant}", f"snapshots_to=results/mini-t5-lookup/snapshots/{variant}"]
    ours = compose_recipe(f"lookup_{variant}", [])
    assert ours == compose_recipe("lookup", LOOKUP_VARIANTS[variant] + where)
    assert compose_recipe(f"lookup_{variant}", ["out=o", "device=cuda"])[1]["device"] == "cuda"
    assert "train-mini recipe=lookup_$$v" in (ROOT / "Makefile").read_text()


def test_every_recipe_is_tested_by_a_run():
    """A run of each recipe (the lookup variants but P: their composition above, on the run of ``lookup``)."""
    assert set(_recipes()) == {"first_of_k", "t5_lm", "decoders", "retrieval_study", "lookup",
                               *(f"lookup_{v}" for v in LOOKUP_VARIANTS)}


@pytest.mark.slow
def test_a_run_saved_on_another_device_resumes_with_a_fresh_data_stream(tmp_path, as_a_process):
    """A lookup run stopped on one device and resumed on another (the GPU calls of docs/gpu.md): the saved data
    generator's state does not fit this device's (a CUDA generator keeps 16 bytes, a CPU one 5,056), so the run
    says so, draws from a seed of (seed, step) and trains to its end instead of stopping on the RNG state; the
    same rerun twice gives the same weights."""
    tiny = ["init_from=null"]
    _run(as_a_process, "lookup", tmp_path / "cli", "stop_step=2", *tiny)
    state = torch.load(tmp_path / "cli" / "state.pt", weights_only=False)
    assert state["generator"].numel() != 16
    state["generator"] = torch.zeros(16, dtype=torch.uint8)  # a CUDA generator's state: seed and offset
    torch.save(state, tmp_path / "cli" / "state.pt")
    shutil.copytree(tmp_path / "cli", tmp_path / "again")
    out = _run(as_a_process, "lookup", tmp_path / "cli", *tiny)
    assert "the saved data generator is another device's (16 bytes of state" in out
    assert "from seed 1 at step 2" in out
    assert (tmp_path / "cli" / "export" / "README.md").is_file()
    _run(as_a_process, "lookup", tmp_path / "again", *tiny)
    a, b = _weights(tmp_path / "cli" / "export"), _weights(tmp_path / "again" / "export")
    assert all(torch.equal(a[k], b[k]) for k in a)
