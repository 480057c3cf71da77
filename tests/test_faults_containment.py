"""Fault injection, second round (docs/results.md, docs/design.md §7): nothing from outside the run executes, and
nothing the run writes lands outside its results directory or replaces a file in part. Each case is a file a user or
an attacker plants (a model directory with code, a pickle, a symbolic link) or a write cut short; each ends refused
before it acts, or with the previous file whole.
"""

from __future__ import annotations

import ast
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest
from test_faults import _env, _Payload
from test_faults_identity import (
    LENGTHX,
    ROOT,
    _limit_file_size,
    _overrides,
    _runner,
    _with_config,
    cli,
    user_error,
)

from lengthx.core.store import ResultsStore

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- 7-8: code from outside the run never executes ----------------------------------------------------------
def test_an_auto_map_directory_is_refused_and_its_code_never_runs(tiny_model_dir, tmp_path, as_a_process):
    """A model directory whose config names its own modeling code, with "y" typed at any prompt: exit 2 naming
    auto_map and model.trust_remote_code; the directory's Python never runs."""
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    marker = tmp_path / "pwned"
    plant = f"open({str(marker)!r}, 'w').close()\n"
    (model / "configuration_evil.py").write_text(
        plant + "from transformers import T5Config\n\n\nclass EvilConfig(T5Config):\n    model_type = 'evil_t5'\n")
    (model / "modeling_evil.py").write_text(
        plant + "from transformers import T5ForConditionalGeneration\n\nfrom .configuration_evil import EvilConfig\n\n\n"
        "class EvilModel(T5ForConditionalGeneration):\n    config_class = EvilConfig\n")
    _with_config(model, model_type="evil_t5", auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                                                        "AutoModelForSeq2SeqLM": "modeling_evil.EvilModel"})
    p = as_a_process(["lengthx", "run", *_overrides(model, tmp_path / "res")], input="y\ny\n")
    assert not marker.exists(), "the model directory's code ran"
    user_error(p.returncode, p.stderr, "auto_map", "modeling_evil.py", "model.trust_remote_code=true")
    assert " ok " not in p.stdout


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == name]


def test_no_loader_unpickles_or_trusts_remote_code():
    """Every torch.load in the package and scripts is weights-only, nothing unpickles, and every from_pretrained
    of a model, config or tokenizer states trust_remote_code (the package's loader passes it through)."""
    files = sorted([*(ROOT / "lengthx").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")])
    problems = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for call in _calls(tree, "load"):
            owner = getattr(call.func.value, "id", "")
            kw = {k.arg: k.value for k in call.keywords}
            if owner == "torch" and not (isinstance(kw.get("weights_only"), ast.Constant)
                                         and kw["weights_only"].value is True):
                problems.append(f"{path}:{call.lineno} torch.load without weights_only=True")
            if owner in ("pickle", "dill", "joblib", "cloudpickle"):
                problems.append(f"{path}:{call.lineno} {owner}.load")
        problems += [f"{path}:{c.lineno} pickle.loads" for c in _calls(tree, "loads")
                     if getattr(c.func.value, "id", "") == "pickle"]
        for call in _calls(tree, "from_pretrained"):
            if getattr(call.func.value, "attr", "") == "Embedding":  # torch.nn.Embedding.from_pretrained(tensor)
                continue
            if not any(k.arg == "trust_remote_code" or k.arg is None for k in call.keywords):
                problems.append(f"{path}:{call.lineno} from_pretrained without trust_remote_code")
    assert not problems, problems


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # the planted pickle, read weights-only
def test_a_pickle_planted_as_train_mini_t5_state_never_runs(tmp_path, as_a_process):
    """docs/gpu.md tells users to run scripts/train_mini_t5.py, which resumes from <out>/state.pt: a planted
    pickle there is refused by the weights-only loader instead of run."""
    out = tmp_path / "run"
    out.mkdir()
    marker = tmp_path / "pwned"
    (out / "state.pt").write_bytes(pickle.dumps({"model": _Payload(marker)}))
    tiny = ["--device", "cpu", "--d-model", "32", "--d-kv", "8", "--d-ff", "64", "--heads", "4", "--enc-layers", "1",
            "--dec-layers", "1", "--batch-size", "8", "--max-minutes", "0"]
    p = as_a_process([ROOT / "scripts" / "train_mini_t5.py", "--out", out, *tiny])
    assert p.returncode != 0 and not marker.exists(), p.stderr[-2000:]
    assert "weights_only" in p.stderr or "Weights only" in p.stderr


# ---- 9-10: writes stay in the results directory and replace files whole --------------------------------------
def test_a_symlinked_records_file_is_refused(tiny_model_dir, tmp_path):
    from lengthx.core.store import StoreError

    res, outside = tmp_path / "res", tmp_path / "outside.jsonl"
    runner = _runner(tiny_model_dir, res)
    (cell, _), = runner.cells()
    outside.write_text("not a record\n" * 3)
    path = ResultsStore(res).records_path(cell.key)
    path.parent.mkdir(parents=True)
    path.symlink_to(outside)
    with pytest.raises(StoreError, match="symbolic link") as exc:
        runner.run()
    assert str(path) in str(exc.value)
    assert outside.read_text() == "not a record\n" * 3  # nothing appended, nothing repaired
    assert not list(tmp_path.rglob("*.corrupt-*"))  # its text was not copied into a side file


def test_a_symlinked_results_csv_or_tables_dir_is_refused(tiny_model_dir, tmp_path, capsys, monkeypatch):
    res, outside = tmp_path / "res", tmp_path / "outside"
    res.mkdir()
    outside.mkdir()
    (res / "results.csv").symlink_to(outside / "results.csv")
    status, err = cli(["run", *_overrides(tiny_model_dir, res)], capsys, monkeypatch)
    user_error(status, err, str(res / "results.csv"), "symbolic link")
    (res / "results.csv").unlink()
    _runner(tiny_model_dir, res).run()
    (res / "tables").symlink_to(outside)
    status, err = cli(["tables", "--results-dir", str(res)], capsys, monkeypatch)
    user_error(status, err, str(res / "tables"), "symbolic link")
    assert list(outside.iterdir()) == []



def test_a_table_write_cut_short_keeps_the_previous_table(tiny_model_dir, tmp_path, as_a_process):
    res = tmp_path / "res"
    _runner(tiny_model_dir, res, settings="[320,400]").run()
    tables = ["tables", "--results-dir", str(res), "--format", "markdown"]
    assert as_a_process(["lengthx", *tables]).returncode == 0
    table = res / "tables" / "aa_table4.md"
    before = table.read_bytes()
    assert len(before) > 600
    p = subprocess.run([*LENGTHX, *tables], capture_output=True, text=True, env=_env(), timeout=120,  # its file limit
                       preexec_fn=_limit_file_size(len(before) // 2))
    user_error(p.returncode, p.stderr, "could not write", "ulimit")
    assert table.read_bytes() == before and not list((res / "tables").glob(".*tmp*"))
