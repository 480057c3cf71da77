"""``model=hf``: your own checkpoint run through the command line and named as itself (docs/design.md §4, "Your own
model"): family from its config.json, L_tr given or trusted, rows, tables and Algorithm 1's cache under its name,
refused before any work when it cannot run, and the shipped minis' numbers when it names a mini's directory."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

from lengthx import TEMPERATURE_GRID
from lengthx.cli import main
from lengthx.config import PACKAGE_DIR
from lengthx.core.runner import Runner
from lengthx.core.store import ResultsStore
from lengthx.errors import UsageError
from lengthx.models.minis import compose_run

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = PACKAGE_DIR / "checkpoints"
LENGTHX = [sys.executable, "-m", "lengthx.cli"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _save(model: torch.nn.Module, tokenizer_of: str, path: Path) -> str:
    """``model`` saved like a hub checkpoint, with the tokenizer of the shipped mini ``tokenizer_of``."""
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(CHECKPOINTS / tokenizer_of).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def own_models(tmp_path_factory) -> dict[str, str]:
    """A small T5 (mini-t5's tokenizer), a small LLaMA (mini-gpt2's) and a small BERT, saved to directories."""
    root = tmp_path_factory.mktemp("own")
    torch.manual_seed(0)
    t5 = T5ForConditionalGeneration(T5Config(
        vocab_size=8000, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        relative_attention_num_buckets=32, relative_attention_max_distance=64, dropout_rate=0.0,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
    llama = LlamaForCausalLM(LlamaConfig(
        vocab_size=4096, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, pad_token_id=0, bos_token_id=0, eos_token_id=0))
    bert = BertModel(BertConfig(vocab_size=4096, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=64, pad_token_id=0))
    return {"t5": _save(t5, "mini-t5", root / "tiny-t5"), "llama": _save(llama, "mini-gpt2", root / "tiny-llama"),
            "bert": _save(bert, "mini-gpt2", root / "tiny-bert")}


def _cli(args: list[str], **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra_env}
    return subprocess.run(LENGTHX + args, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("family", ["t5", "llama"])
def test_an_own_checkpoint_runs_end_to_end_under_its_own_name(own_models, family, tmp_path, as_a_process):
    path, res = own_models[family], tmp_path / "res"
    name = Path(path).name  # tiny-t5, tiny-llama
    p = as_a_process(["lengthx", "run", "model=hf", f"model.path={path}", "model.l_tr=128", "task=passkey",
                      "method=pmax", "task.unit=tokens", "task.settings=[128,256]", "task.num_examples=2",
                      "calibration.num_examples=1", f"results_dir={res}"])
    assert p.returncode == 0, p.stderr[-3000:]
    df = ResultsStore(res).read()
    assert set(df["model"]) == {name} and (df["status"] == "ok").all()
    assert sorted(df["cell"].unique()) == [f"{name}|pmax|passkey|128tokens", f"{name}|pmax|passkey|256tokens"]
    assert set(df["L_tr"].astype(int)) == {128}
    # τ at 2 L_tr is Algorithm 1's: the grid value whose S̄_ex(τ) is closest to S̄_tr(1), cached under the name
    tau = df[(df["metric"] == "tau") & (df["setting"] == "256tokens")]["value"].item()
    [cache] = (res / "calibration").glob(f"{name}__passkey__256tokens__pmax__*.json")
    info = json.loads(cache.read_text())
    assert info["model"]["name"] == name and info["model"]["family"] == family and info["model"]["l_tr"] == 128
    closest = min(info["evaluated"], key=lambda t: abs(info["evaluated"][t] - info["target"]))
    assert tau == pytest.approx(float(closest)) == pytest.approx(info["tau"])
    assert len(info["evaluated"]) == len(TEMPERATURE_GRID) and tau in TEMPERATURE_GRID
    p = as_a_process(["lengthx", "tables", "--summary", "--results-dir", res])
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.search(rf"^\| {name} \| passkey \| 256tokens \| accuracy \| .*τ=", p.stdout, re.M)
    if family == "t5":  # paper A's figures of its attention (lengthx stats) carry the name too
        p = as_a_process(["lengthx", "stats", "model=hf", f"model.path={path}", "model.l_tr=128", "task=passkey",
                          "task.unit=tokens", "task.settings=[256]", "calibration.num_examples=1",
                          f"results_dir={res}"])
        assert p.returncode == 0, p.stderr[-3000:]
        p = as_a_process(["lengthx", "figures", "--results-dir", res])
        assert p.returncode == 0, p.stderr[-3000:]
        drawn = {f.name for f in (res / "figures").glob("*.png")}
        assert {f"fig1_bias_{name}.png", f"fig2_qq_{name}_passkey.png", f"fig7_temperature_{name}_passkey.png"} \
            <= drawn, drawn


def _refused(argv: list[str], capsys) -> str:
    """The one line ``lengthx run <argv>`` prints as it exits with status 2."""
    with pytest.raises(SystemExit) as exc:
        main(["run", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_an_unsupported_family_stops_before_any_work(own_models, tmp_path, capsys):
    res = tmp_path / "res"
    err = _refused(["model=hf", f"model.path={own_models['bert']}", "model.l_tr=64", "task=passkey", "method=pmax",
                    f"results_dir={res}"], capsys)
    assert "config.json is a bert checkpoint; lengthx runs model types t5, gpt2, gpt_neox, llama, mistral" in err
    assert not res.exists()  # nothing was written: refused before the results directory is made


@pytest.mark.parametrize(("argv", "needle"), [
    (["model=hf"], "model=hf runs your own checkpoint: name it with model.path=DIR"),
    (["model=hf", "model.path={t5}"], "model.l_tr is required, because"),
    (["model=hf", "model.path={t5}", "model.l_tr=64", "model.name=flan-t5-xl"],
     "model.name=flan-t5-xl is a configured model's name"),
    (["model=hf", "model.path={t5}", "model.l_tr=64", "model.name=a|b"], "model.name=a|b: a model name is"),
    (["model=hf", "model.path={t5}", "model.l_tr=64", "model.family=gpt2"], "model.family=gpt2: "),
    (["model=hf", "model.path={t5}/absent", "model.l_tr=64"], "is not a directory"),
])
def test_an_own_model_that_cannot_run_is_one_line(own_models, argv, needle, capsys):
    err = _refused([a.format(t5=own_models["t5"]) for a in argv], capsys)
    assert needle in err, err


def test_the_family_and_a_trusted_length_come_from_config_json(own_models, tmp_path):
    cfg = compose_run(["model=hf", f"model.path={own_models['llama']}", "model.l_tr=64"])
    assert (cfg.model.name, cfg.model.family, cfg.model.l_tr, cfg.model.pe) == ("tiny-llama", "llama", 64, "RoPE")
    with pytest.raises(UsageError, match="states no training length lengthx trusts"):  # llama's 4096 is not trusted
        compose_run(["model=hf", f"model.path={own_models['llama']}"])
    mistral = tmp_path / "my-mistral"  # a Mistral checkpoint is served by the LLaMA adapter
    shutil.copytree(own_models["llama"], mistral)
    config = json.loads((mistral / "config.json").read_text())
    (mistral / "config.json").write_text(json.dumps({**config, "model_type": "mistral"}))
    assert compose_run(["model=hf", f"model.path={mistral}", "model.l_tr=32"]).model.family == "llama"
    # GPT-2's position table and Pythia's context are trusted: the shipped decoders need no model.l_tr
    for mini, family in (("mini-gpt2", "gpt2"), ("mini-pythia", "gpt_neox")):
        cfg = compose_run(["model=hf", f"model.path={CHECKPOINTS / mini}"])
        assert (cfg.model.family, cfg.model.l_tr, cfg.model.name) == (family, 128, f"hf-{mini}")
    named = compose_run(["model=hf", f"model.path={CHECKPOINTS / 'mini-t5'}", "model.l_tr=256", "model.name=mine"])
    assert named.model.name == "mine" and named.model.trust_remote_code is False


def test_a_hub_id_runs_from_the_local_cache_named_by_its_repository(own_models, tmp_path, monkeypatch):
    import huggingface_hub.constants

    snapshot = tmp_path / "models--acme--tiny-llama-v2" / "snapshots" / ("0" * 40)
    shutil.copytree(own_models["llama"], snapshot)  # the cache's layout: a snapshot per revision, refs/main
    (tmp_path / "models--acme--tiny-llama-v2" / "refs").mkdir()
    (tmp_path / "models--acme--tiny-llama-v2" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = compose_run(["model=hf", "model.hub_id=acme/tiny-llama-v2", "model.l_tr=64"])
    assert (cfg.model.name, cfg.model.family, cfg.model.path) == ("tiny-llama-v2", "llama", None)
    res = tmp_path / "res"
    p = _cli(["run", "model=hf", "model.hub_id=acme/tiny-llama-v2", "model.l_tr=128", "task=passkey", "method=log",
              "task.unit=tokens", "task.settings=[256]", "task.num_examples=1", f"results_dir={res}"],
             HF_HUB_CACHE=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    df = ResultsStore(res).read()
    assert set(df["cell"]) == {"tiny-llama-v2|log|passkey|256tokens"} and (df["status"] == "ok").all()
    with pytest.raises(UsageError, match="hub_id=acme/absent: its config.json is neither in the local"):
        compose_run(["model=hf", "model.hub_id=acme/absent", "model.l_tr=64"])
    # a configured model's repository keeps its rows apart from the configured model's: hf-<name>
    flan = tmp_path / "models--google--flan-t5-xl"
    shutil.copytree(tmp_path / "models--acme--tiny-llama-v2", flan)
    assert compose_run(["model=hf", "model.hub_id=google/flan-t5-xl", "model.l_tr=64"]).model.name == "hf-flan-t5-xl"


def test_code_in_the_directory_never_runs_unless_asked(own_models, tmp_path, capsys):
    remote = tmp_path / "remote"
    shutil.copytree(own_models["llama"], remote)
    config = json.loads((remote / "config.json").read_text())
    (remote / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModelForCausalLM": "x.Model"}}))
    err = _refused(["model=hf", f"model.path={remote}", "model.l_tr=64", f"results_dir={tmp_path / 'res'}"], capsys)
    assert "has an auto_map" in err and "model.trust_remote_code=true" in err


@pytest.mark.parametrize(("mini", "extra", "settings"), [
    ("mini-t5", ["model.l_tr=256"], "[256,512]"),  # T5 states no training length: given
    ("mini-pythia", [], "[128,256]"),  # GPT-NeoX's max_position_embeddings: 128, the configured mini's L_tr
])
def test_a_minis_directory_gives_the_configured_minis_numbers(mini, extra, settings, tmp_path):
    common = ["task=passkey", "method=pmax", "task.unit=tokens", f"task.settings={settings}", "task.num_examples=2",
              "calibration.num_examples=1", "device=cpu"]
    configured = compose_run([f"model={mini}", *common, f"results_dir={tmp_path / 'configured'}"])
    own = compose_run(["model=hf", f"model.path={CHECKPOINTS / mini}", *extra, *common,
                       f"results_dir={tmp_path / 'own'}"])
    assert own.model.name == f"hf-{mini}" and own.model.l_tr == configured.model.l_tr
    rows = {}
    for cfg in (configured, own):
        Runner(cfg).run()
        df = ResultsStore(Path(cfg.results_dir)).read()
        assert (df["status"] == "ok").all() and set(df["model"]) == {cfg.model.name}
        rows[cfg.model.name] = df.set_index(["setting", "metric"])[["value", "tau", "n", "L_ex"]].sort_index()
    pd.testing.assert_frame_equal(rows[mini], rows[f"hf-{mini}"])
    taus = rows[mini].xs("tau", level="metric")["value"]
    assert len(taus) == 2 and not math.isnan(taus.iloc[-1])
    outputs = [[r["output"] for _, r in sorted(ResultsStore(Path(cfg.results_dir)).load_records(
        f"{cfg.model.name}|pmax|passkey|{s}").items())] for cfg in (configured, own)
        for s in (f"{v}tokens" for v in json.loads(settings))]
    assert outputs[:2] == outputs[2:] and all(len(o) == 2 for o in outputs)


def test_tables_show_an_own_model_beside_the_configured_ones_where_its_settings_match():
    from lengthx.report.tables import TABLES
    from lengthx.report.tables.render import render

    def row(model: str, method: str, setting: str, value: float) -> dict:
        return {"model": model, "method": method, "task": "passkey", "setting": setting, "metric": "accuracy",
                "value": value, "status": "ok", "n": 4, "timestamp": "2026-01-01T00:00:00", "data": "synthetic",
                "config_hash": model, "cell": f"{model}|{method}|passkey|{setting}"}

    df = pd.DataFrame([row("mini-t5", "none", "20k", 50.0), row("my-t5", "none", "20k", 75.0),
                       row("my-t5", "pmax", "20k", 100.0), row("my-llama", "none", "64tokens", 25.0)])
    md = render(TABLES["aa_table4"], df).markdown.splitlines()
    mine = md.index(next(line for line in md if line.startswith("| **my-t5** |")))
    assert any(line.startswith("| **mini-T5** |") for line in md)  # the configured model under its display name
    assert md[mine].split("|")[13].strip() == "75" and md[mine + 1].split("|")[13].strip() == "100"
    assert md[mine + 1].startswith("| w/ P_{max} |")
    assert not any("my-llama" in line for line in md)  # its setting is no column of Table 4


def readme_own_model_block() -> str:
    """The bash block of the "Your own model" paragraph (in the Quickstart section of docs/usage.md)."""
    text = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    section = text.split("\n## Quickstart", 1)[1].split("\n## ", 1)[0]
    return section.split("**Your own model.**", 1)[1].split("```bash\n", 1)[1].split("\n```", 1)[0]


@pytest.mark.slow
def test_the_readme_own_model_example_runs_as_written(tmp_path):
    block = readme_own_model_block()
    assert "model=hf model.path=my-t5" in block and "lengthx tables --summary" in block
    env = {k: v for k, v in os.environ.items() if not k.startswith("LENGTHX_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", LENGTHX_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    prelude = (f'lengthx() {{ "{sys.executable}" -m lengthx.cli "$@"; }}\npython() {{ "{sys.executable}" "$@"; }}\n'
               "set -e\n")  # the block's `lengthx` and `python`: this checkout's, in this interpreter
    work = tmp_path / "work"
    work.mkdir()
    p = subprocess.run(["bash", "-c", prelude + block], cwd=work, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.search(r"^\| my-t5 \| passkey \| 20k \| accuracy \| \d+ \(n=4\) \| \d+ \(τ=0\.\d+, n=4\) \|$",
                     p.stdout, re.M), p.stdout[-3000:]
    table4 = (work / "results" / "local" / "mini" / "tables" / "aa_table4.md").read_text().splitlines()
    mine = next(line for line in table4 if line.startswith("| **my-t5** |")).split("|")
    assert re.fullmatch(r"\d+ \[\d+, \d+\]", mine[13].strip()), mine  # Passkey 20k, with its interval
