"""A run whose every cell is done answers from the cell hashes an earlier run of the same inputs kept
(lengthx.core.store.done_memo, docs/results.md): what it prints is the full path's, nothing heavy is loaded, and any
change to what a hash is made of (the config, the checkpoint, the code, the environment) or to the rows sends it
down the full path."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lengthx.core.store import COLUMNS, ResultsStore
from lengthx.core.store import cache as store_cache
from lengthx.core.store.done_memo import MEMO_DIR, finished_cells, memo_key, remember
from lengthx.models.minis import compose_run

ROOT = Path(__file__).resolve().parents[1]
RUN = ["run", "model=mini-t5", "task=passkey", "method=none", "task.unit=tokens", "task.settings=[128]",
       "task.num_examples=1"]
# lengthx run in a new process; afterwards, on stderr, which of the heavy libraries it imported
WRAPPER = """
import sys
from lengthx.cli import main
try:
    main(sys.argv[1:])
finally:
    print("LOADED", sorted(m for m in ("torch", "transformers", "tokenizers") if m in sys.modules), file=sys.stderr)
"""


def _run(argv: list[str]) -> tuple[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = re.search(r"LOADED (\[.*\])", proc.stderr).group(1)
    return re.sub(r"^\[[^]]*\]", "[time]", proc.stdout, flags=re.M), loaded


@pytest.mark.slow
def test_an_all_done_run_answers_as_the_full_path_without_loading_a_model(tmp_path):
    """The first run computes its cell and keeps its hash; the next prints exactly what the full path prints
    for an all-done run (a skip line, then the summary), without importing torch, transformers or tokenizers."""
    argv = [*RUN, f"results_dir={tmp_path}"]
    first, _ = _run(argv)
    assert "mini-t5|none|passkey|128tokens" in first and " ok " in first
    assert len(list((tmp_path / MEMO_DIR).glob("*.json"))) == 1
    answered, loaded = _run(argv)
    assert loaded == "[]", loaded
    for memo in (tmp_path / MEMO_DIR).glob("*.json"):
        memo.unlink()
    full, loaded_full = _run(argv)
    assert "torch" in loaded_full  # the full path hashes the cells with the model's tokenizer
    assert answered == full
    assert "skip finished cell mini-t5|none|passkey|128tokens" in answered
    assert "done (already in results.csv)" in answered


# ---- what the memo's key holds, and when the rows send a run down the full path ------------------------------
@pytest.fixture
def checkpoint(tmp_path) -> Path:
    """A copy of the shipped mini-t5 checkpoint (its files may be touched)."""
    return Path(shutil.copytree(ROOT / "lengthx" / "checkpoints" / "mini-t5", tmp_path / "ckpt"))


def _cfg(checkpoint: Path, results: Path, *extra: str, settings: str = "[512]"):
    return compose_run(["model=hf", f"model.path={checkpoint}", "model.l_tr=256", "task=passkey", "method=none",
                        "task.unit=tokens", f"task.settings={settings}", f"results_dir={results}", *extra])


def _done_store(cfg, results: Path) -> list[tuple[str, str]]:
    """A results directory holding done rows of two made-up cells, with their hashes kept as a run keeps them."""
    cells = [("ckpt|none|passkey|512tokens", "a" * 12), ("ckpt|none|passkey|1024tokens", "b" * 12)]
    store = ResultsStore(results)
    for cell, chash in cells:
        rows = [{"paper": "A", "model": "ckpt", "method": "none", "task": "passkey", "setting": cell.split("|")[-1],
                 "metric": metric, "value": 1.0, "n": 10, "tau": 1.0, "status": "ok", "cell": cell,
                 "config_hash": chash} for metric in ("accuracy", "tau")]
        store.append_rows(rows, cell, chash)
    remember(cfg, cells, ["accuracy", "tau"], 10, ["synthetic", "synthetic"])
    store_cache._FRAMES.clear()
    store.read()  # as a run leaves it: read once after its writes
    return cells


def test_the_cells_kept_answer_while_nothing_changed(tmp_path, checkpoint):
    cfg = _cfg(checkpoint, tmp_path / "res")
    cells = _done_store(cfg, tmp_path / "res")
    assert finished_cells(cfg) == [c for c, _ in cells]
    assert finished_cells(_cfg(checkpoint, tmp_path / "res", "task.num_examples=20")) is None  # another key


def test_the_answer_warns_of_settings_far_past_the_papers_as_the_full_path_does(tmp_path, checkpoint, capsys):
    """The full path warns, before its cells, of settings far past the papers' (perhaps meant in another unit);
    the answer from the memo prints the same warning first, in the run's log format."""
    from lengthx.cli.run import finished_run

    cfg = _cfg(checkpoint, tmp_path / "res", settings="[10000]")
    cells = _done_store(cfg, tmp_path / "res")
    capsys.readouterr()
    assert finished_run(cfg)
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"\[[-0-9 :,]+\]\[lengthx\]\[WARNING\] - lengthx: task.settings: 10000 tokens = 39x model.l_tr "
                        r"\(256 tokens\);.*add task.unit=chars", out[0]), out[0]
    assert [ln.split("] - ", 1)[1] for ln in out[1:3]] == [f"skip finished cell {c}" for c, _ in cells]
    assert out[3:-1] == [f"{c:48s} done (already in results.csv)" for c, _ in cells]
    assert out[-1] == f"results: {(tmp_path / 'res').resolve()}"  # where, in full, as the full path ends


@pytest.mark.parametrize("change", ["config", "checkpoint", "tokenizer", "environment", "more examples"])
def test_a_change_to_what_a_hash_is_made_of_changes_the_key(tmp_path, checkpoint, monkeypatch, change):
    cfg = _cfg(checkpoint, tmp_path / "res")
    key = memo_key(cfg)
    assert key is not None and memo_key(_cfg(checkpoint, tmp_path / "res")) == key  # the same inputs: the same key
    if change == "config":
        cfg = _cfg(checkpoint, tmp_path / "res", "task.seed=5")
    elif change == "checkpoint":
        weights = max(checkpoint.glob("*.safetensors"), key=lambda p: p.stat().st_size)
        weights.write_bytes(weights.read_bytes())  # the same bytes, rewritten: another version of the file
    elif change == "tokenizer":
        (checkpoint / "tokenizer_config.json").write_text(json.dumps(
            {**json.loads((checkpoint / "tokenizer_config.json").read_text()), "model_max_length": 7}))
    elif change == "environment":
        monkeypatch.setenv("LENGTHX_FUSED_STATS", "0")
    else:
        cfg = _cfg(checkpoint, tmp_path / "res", "task.num_examples=20")
    assert memo_key(cfg) != key


def test_every_file_of_the_package_is_in_the_key_but_the_shipped_checkpoints():
    """A task's code or a config anywhere in lengthx/ decides a hash, so its version is in the memo's key."""
    import lengthx
    from lengthx.core.store import done_memo

    package = Path(lengthx.__file__).resolve().parent
    versioned = {line.split("|")[0] for line in done_memo._versions(done_memo.PACKAGE)}
    for part in ("tasks/passkey.py", "conf/run.yaml", "core/cells.py", "models/loading.py"):
        assert f"{package / part}" in versioned, part
    assert not any("/checkpoints/" in v for v in versioned)  # versioned as the run's model.path instead


def test_a_hub_model_or_hub_data_is_never_answered_from_the_memo(tmp_path, checkpoint):
    hub = compose_run(["profile=paper", "model=flan-t5-xl", "task=passkey", f"results_dir={tmp_path}"])
    assert hub.model.get("path") is None  # its weights come from the hub cache, which may change under its id
    assert memo_key(hub) is None
    cfg = _cfg(checkpoint, tmp_path / "res")
    remember(cfg, [("c|none|passkey|512tokens", "a" * 12)], ["accuracy", "tau"], 10, ["emozilla/pg19:test"])
    assert not (tmp_path / "res" / MEMO_DIR).exists()


@pytest.mark.parametrize("rows", ["a cell's rows removed", "fewer examples", "a torn last row", "a row to set aside"])
def test_rows_that_are_not_all_done_and_sound_take_the_full_path(tmp_path, checkpoint, rows):
    """The memo only says which hashes to look for; the rows decide, and rows a run would repair (a torn last
    row, a row that is not a result) leave the answer to the full path, which repairs them."""
    res = tmp_path / "res"
    cfg = _cfg(checkpoint, res)
    cells = _done_store(cfg, res)
    csv = res / "results.csv"
    lines = csv.read_text().splitlines(keepends=True)
    if rows == "a cell's rows removed":
        csv.write_text("".join(ln for ln in lines if cells[1][1] not in ln))
    elif rows == "fewer examples":
        csv.write_text("".join(lines).replace(",10,", ",5,"))
    elif rows == "a torn last row":
        csv.write_text("".join(lines) + lines[-1][:20])
    else:
        bad = lines[-1].split(",")
        bad[COLUMNS.index("value")] = "nan"
        csv.write_text("".join(lines) + ",".join(bad))
    store_cache._FRAMES.clear()
    ResultsStore(res).read()  # read in full since: a sound file has its parsed copy again
    assert finished_cells(cfg) is None
