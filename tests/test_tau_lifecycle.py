"""Paper A's τ from choice to use, one lifecycle for ``lengthx run`` and paper B's perplexity (lengthx.core.tau):
a calibration cached only for its own key and a τ in range; τ on the model's attention only inside its block."""

from __future__ import annotations

import inspect

import pytest
import torch
from conftest import loaded_model, tiny_t5

from lengthx.attention.temperature import TAU_ATTR
from lengthx.core import perplexity, runner
from lengthx.core.tau import applied_temperature, keep_calibration, read_calibration


def test_tau_is_on_the_attention_only_inside_its_block_however_it_ends():
    loaded = loaded_model(tiny_t5(), "t5", 64)
    ids = torch.randint(3, 64, (1, 12), generator=torch.Generator().manual_seed(0))
    plain = loaded.model.encoder(input_ids=ids).last_hidden_state
    with applied_temperature(loaded, 0.6, "encoder") as modules:
        assert modules and all(getattr(m, TAU_ATTR) == 0.6 for m in modules)
        sharper = loaded.model.encoder(input_ids=ids).last_hidden_state
    assert not torch.allclose(plain, sharper)
    with pytest.raises(KeyboardInterrupt), applied_temperature(loaded, 0.6, "encoder") as modules:
        raise KeyboardInterrupt  # a Ctrl-C in the middle of a cell
    assert not any(hasattr(m, TAU_ATTR) for m in modules)
    assert torch.equal(loaded.model.encoder(input_ids=ids).last_hidden_state, plain)
    with applied_temperature(loaded, 1.0, "encoder") as modules:
        assert modules == []  # τ = 1 touches nothing


def test_a_calibration_is_read_back_only_for_its_key_and_a_tau_in_range(tmp_path):
    path, key = tmp_path / "c.json", {"cell_hash": "abc"}
    info = {"target": 0.4, "evaluated": {"1.0": 0.3, "0.8": 0.41}, "forward_passes": 3}
    keep_calibration(path, key, 0.8, info, "m|pmax|passkey|1k", "pmax")
    assert read_calibration(path, key)["tau"] == 0.8
    assert read_calibration(path, {"cell_hash": "other"}) is None  # another cell's: set aside, recomputed
    with pytest.raises(ValueError, match="pmax computed τ that"):
        keep_calibration(tmp_path / "d.json", key, 1.7, info, "m|pmax|passkey|1k", "pmax")
    assert not (tmp_path / "d.json").exists()


def test_run_and_paper_b_perplexity_share_the_lifecycle():
    for module in (runner, perplexity):
        source = inspect.getsource(module)
        assert "applied_temperature(" in source and "set_temperature(" not in source, module.__name__
        assert "read_calibration(" in source and "keep_calibration(" in source, module.__name__
        assert "options_from_config(" in source, module.__name__
