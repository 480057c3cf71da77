"""Model loading: local directories, eval mode, the temperature-capable attention, clear errors."""

import re

import pytest
import torch
from omegaconf import OmegaConf

from lengthx.models import ModelNotAvailable, load_model, resolve_device


def test_load_local_dir_is_eval_and_uses_lengthx_attention(tiny_model_dir):
    cfg = OmegaConf.create({"name": "tiny", "hub_id": None, "path": tiny_model_dir, "family": "t5", "l_tr": 64})
    loaded = load_model(cfg, device="cpu")
    assert not loaded.model.training
    assert loaded.model.config._attn_implementation == "lengthx"
    assert loaded.device == torch.device("cpu") and loaded.l_tr == 64
    assert next(loaded.model.parameters()).dtype == torch.float32


def test_missing_path_and_absent_hub_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bad = OmegaConf.create({"name": "x", "hub_id": None, "path": str(tmp_path / "nope"), "family": "t5", "l_tr": 8})
    with pytest.raises(ModelNotAvailable, match="model.path="):
        load_model(bad, device="cpu")
    absent = OmegaConf.create({"name": "ghost", "hub_id": "nobody/ghost-t5", "path": None, "family": "t5",
                               "l_tr": 8})
    with pytest.raises(ModelNotAvailable, match=r"'ghost' \(hub id nobody/ghost-t5\).*model.path="):
        load_model(absent, device="cpu")


def test_absent_hub_model_suggests_the_download_command_huggingface_hub_ships(monkeypatch):
    from importlib.metadata import distribution

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shipped = {ep.name for ep in distribution("huggingface_hub").entry_points if ep.group == "console_scripts"}
    absent = OmegaConf.create({"name": "ghost", "hub_id": "nobody/ghost-t5", "path": None, "family": "t5",
                               "l_tr": 8})
    with pytest.raises(ModelNotAvailable) as err:
        load_model(absent, device="cpu")
    suggested = re.search(r"\((\S+) download nobody/ghost-t5\)", str(err.value))
    assert suggested and suggested.group(1) in shipped, (str(err.value), shipped)


def test_device_auto_on_cpu_machine():
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto").type in ("cpu", "mps")
        with pytest.raises(ValueError, match="no CUDA"):
            resolve_device("cuda")
