"""The shipped mini checkpoints and profile=mini's mapping of paper models onto them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from lengthx.models import minis
from lengthx.models.minis import apply_profile

CHECKPOINTS = Path(minis.__file__).resolve().parents[1] / "checkpoints"
DECODER_MINIS = ("mini-gpt2", "mini-pythia", "mini-bloom")

pytestmark = pytest.mark.usefixtures("one_thread")


def compose_run(*overrides: str):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from lengthx.config import CONF_DIR, register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="run", overrides=list(overrides))


@pytest.mark.parametrize(
    ("model", "mini", "l_tr"),
    [("gpt2", "mini-gpt2", 128), ("gpt2-xl", "mini-gpt2", 128), ("pythia-1.4b", "mini-pythia", 128),
     ("bloom-1b1", "mini-bloom", 128), ("flan-t5-xl", "mini-t5", 256), ("codet5p-770m-py", "mini-t5-lm", 128),
     ("t5-xl-lm", "mini-t5-lm", 128)],
)
def test_mini_profile_maps_paper_models_onto_shipped_minis(model, mini, l_tr):
    cfg = apply_profile(compose_run(f"model={model}"))
    assert cfg.model.name == model  # results keep the paper model's name (its table row)
    assert Path(cfg.model.path) == CHECKPOINTS / mini and cfg.model.l_tr == l_tr
    explicit = apply_profile(compose_run(f"model={model}", "model.path=/somewhere"))
    assert explicit.model.path == "/somewhere"


def test_paper_profile_keeps_the_hub_model():
    cfg = apply_profile(compose_run("profile=paper", "model=gpt2"))
    assert cfg.model.path is None and cfg.model.l_tr == 1024 and cfg.model.hub_id == "gpt2"


def test_paper_profile_names_its_model():
    """profile=paper no longer swaps the default model for a paper model: a shipped mini there is a usage error."""
    from lengthx.errors import UsageError

    with pytest.raises(UsageError, match="profile=paper runs the papers' models.*model=flan-t5-xl"):
        apply_profile(compose_run("profile=paper"))
    assert apply_profile(compose_run("profile=paper", "model=flan-t5-xl")).model.hub_id == "google/flan-t5-xl"


def test_train_config_maps_too():
    from lengthx.cli.train import compose_train_config

    cfg = compose_train_config(["model=pythia-160m"])
    assert Path(cfg.model.path) == CHECKPOINTS / "mini-pythia" and cfg.model.l_tr == 128


def test_missing_mini_checkpoint_names_the_script(tmp_path, monkeypatch):
    (tmp_path / "mini-x.yaml").write_text(
        f"name: mini-x\npath: {tmp_path / 'absent'}\nfamily: gpt2\nl_tr: 64\ntrained_by: python scripts/make_x.py\n"
    )
    monkeypatch.setattr(minis, "CONF_MODEL_DIR", tmp_path)
    cfg = OmegaConf.create({"profile": {"name": "mini"},
                            "model": {"name": "gpt2", "path": None, "mini": "mini-x", "family": "gpt2", "l_tr": 1024}})
    with pytest.raises(ValueError, match=r"model=gpt2 as mini-x.*missing.*python scripts/make_x.py"):
        apply_profile(cfg)
    cfg.model.family = "bloom"
    (tmp_path / "absent").mkdir()
    with pytest.raises(ValueError, match="family"):
        apply_profile(cfg)


def test_mini_pythia_slowest_rotary_frequency_turns_half_a_circle_over_l_t():
    """The shipped RoPE mini's base (lengthx.minis.decoders.half_turn_rope_theta), read back through
    transformers' own rotary embedding: Pythia's quarter of each head rotated, slowest angle over L_t = π."""
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

    config = GPTNeoXConfig.from_pretrained(CHECKPOINTS / "mini-pythia")
    inv_freq = GPTNeoXRotaryEmbedding(config).inv_freq.double()
    assert inv_freq.numel() == config.hidden_size // config.num_attention_heads // 4 // 2
    assert float(inv_freq.min()) * config.max_position_embeddings == pytest.approx(math.pi, rel=1e-6)


@pytest.mark.slow
def test_accelerate_launch_cpu_trains_the_shipped_mini(tmp_path):
    """The README's command, `accelerate launch --cpu --num_processes 2`, on mini-gpt2 (profile=mini's gpt2).

    accelerate's ``--cpu`` picks its simple launcher, so this is one process whatever ``--num_processes``
    says; CPU data parallelism is ``--multi_gpu`` on a machine without GPUs (gloo), which
    tests/test_training.py::test_accelerate_launch_two_processes_matches_one checks step by step.
    """
    import os
    import subprocess
    import sys

    accelerate = Path(sys.executable).with_name("accelerate")
    out = tmp_path / "run"
    cmd = [str(accelerate), "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "lengthx.cli.train",
           "model=gpt2", "method=chunk-0.25", "start=pretrained", "l_e_factor=2", "data=stdlib", "data.max_docs=6",
           f"data.cache_dir={tmp_path / 'c'}",
           "train.max_steps=3", "train.batch_size=2", "train.save_every=0", "train.progress=false",
           f"train.output_dir={out}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((out / "final" / "lengthx_train.json").read_text())
    assert meta["steps"] == 3 and meta["base_model"]["path"].endswith("mini-gpt2")
    assert meta["l_t"] == 128 and meta["l_e"] == 256 and meta["max_positions"] == 256  # wpe interpolated to L_e


def test_out_of_the_box_rope_breaks_past_l_t_but_interpolated_ape_and_alibi_do_not():
    """Paper B Figure 2's shape on the shipped minis: perplexity at 5L_t over that at L_t, on the same text."""
    from lengthx.models.loading import load_model
    from lengthx.segmented.lengths import LengthState
    from lengthx.tasks.segmented_ppl import SegmentedPPLTask, sequence_nll

    def ppl(loaded, lengths, task, length: int) -> float:
        lengths.set_length(loaded.model, length)
        vals = []
        for _, ids in task.sequences(loaded.tokenizer, length, 6):
            nll, n = sequence_nll(loaded.model, ids.unsqueeze(0))
            vals.append(math.exp(float(nll.sum()) / int(n.sum())))
        return sum(vals) / len(vals)

    ratio = {}
    for model in ("gpt2", "pythia-160m", "bloom-1b1"):
        cfg = apply_profile(compose_run(f"model={model}", "task=segmented_ppl", "data=stdlib"))  # its own domain
        loaded = load_model(cfg.model, device="cpu", dtype="float32")
        lengths = LengthState.capture(loaded.model, str(cfg.model.family))
        task = SegmentedPPLTask(cfg.task, "mini", ref_length=640)  # 6 pieces of 640 tokens, also cut into 5 x 128
        ratio[model] = ppl(loaded, lengths, task, 640) / ppl(loaded, lengths, task, 128)
    assert ratio["pythia-160m"] > 1.6, ratio  # RoPE past its training length
    assert ratio["gpt2"] < 1.25 and ratio["bloom-1b1"] < 1.1, ratio  # APE interpolated 128 -> 640; ALiBi


def _two_minis(tmp_path: Path) -> None:
    """mini-a (a T5 stand-in that hands lines to mini-b) and mini-b, each with a checkpoint directory."""
    for name in ("a", "b"):
        (tmp_path / f"ckpt-{name}").mkdir()
    (tmp_path / "mini-a.yaml").write_text(f"name: mini-a\npath: {tmp_path / 'ckpt-a'}\nfamily: t5\nl_tr: 256\n"
                                          "trained_by: make a\ntopics_format: short\ntask_minis:\n  lines: mini-b\n")
    (tmp_path / "mini-b.yaml").write_text(f"name: mini-b\npath: {tmp_path / 'ckpt-b'}\nfamily: t5\nl_tr: 128\n"
                                          "trained_by: make b\nlines_format: short\n")


def _cfg(tmp_path: Path, model: str, task: str, path: str | None = None):
    entry = {"name": model, "path": path, "family": "t5", "l_tr": 512}
    if model.startswith("mini-"):
        entry["trained_by"] = "make a"
    else:
        entry["mini"] = "mini-a"
    return OmegaConf.create({"profile": {"name": "mini"}, "task": {"name": task}, "model": entry})


@pytest.mark.parametrize("model", ["flan-t5-large", "mini-a"])
def test_a_mini_hands_a_task_to_the_stand_in_that_does_it(tmp_path, monkeypatch, model):
    """``task_minis`` of the mini (docs/mini-t5-lookup.md, GO): lines run on mini-b, in its format and at its L_tr;
    every other task stays on mini-a; the row keeps the model's name."""
    _two_minis(tmp_path)
    monkeypatch.setattr(minis, "CONF_MODEL_DIR", tmp_path)
    own_path = str(tmp_path / "ckpt-a") if model == "mini-a" else None
    lines = apply_profile(_cfg(tmp_path, model, "lines", own_path)).model
    assert (lines.name, lines.path, lines.l_tr, lines.mini) == (model, str(tmp_path / "ckpt-b"), 128, "mini-b")
    assert lines.lines_format == "short"
    topics = apply_profile(_cfg(tmp_path, model, "topics", own_path)).model
    assert Path(topics.path) == tmp_path / "ckpt-a" and topics.get("lines_format") is None
    assert minis.task_minis("mini-a") == {"lines": "mini-b"} and minis.task_minis("mini-b") == {}


def test_an_explicit_path_is_never_handed_on(tmp_path, monkeypatch):
    """A snapshot measured by a study (``model=mini-a model.path=DIR``) runs as itself on every task."""
    _two_minis(tmp_path)
    monkeypatch.setattr(minis, "CONF_MODEL_DIR", tmp_path)
    cfg = apply_profile(_cfg(tmp_path, "mini-a", "lines", "/a/snapshot")).model
    assert cfg.path == "/a/snapshot" and cfg.get("lines_format") is None and cfg.l_tr == 512


def test_handing_a_task_on_leaves_the_mini_s_other_cells_current(tmp_path, monkeypatch):
    """Adding ``task_minis`` to a shipped mini changes what its handed task runs on (that checkpoint enters the
    cell's hash by content), not what any other task computes: those cells keep their hashes."""
    from lengthx.core.cells import model_identity

    _two_minis(tmp_path)
    monkeypatch.setattr(minis, "CONF_MODEL_DIR", tmp_path)
    handing = apply_profile(_cfg(tmp_path, "mini-a", "topics", str(tmp_path / "ckpt-a"))).model
    with open_dict(handing):
        handing.task_minis = {"lines": "mini-b"}
    alone = handing.copy()
    with open_dict(alone):
        del alone["task_minis"]
    assert model_identity(handing) == model_identity(alone)
