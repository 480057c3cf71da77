"""A damaged tensor file in the newest training checkpoint is named before anything is loaded from it, with the
fix (docs/results.md, "Training checkpoints"): before, ``safetensors`` raised "invalid header length" naming no
file, and the command printed it as an unexpected error (exit 1)."""

from __future__ import annotations

import pytest
from conftest import train_overrides

from lengthx.errors import UserError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors"])
def test_a_damaged_tensor_file_of_the_newest_checkpoint_is_named(models, corpus, tmp_path, name):
    from lengthx.cli.train import compose_train_config
    from lengthx.segmented.loop import train

    ov = train_overrides(models, corpus, tmp_path, method="da", out="run",
                         **{"train.max_steps": 4, "train.save_every": 2, "train.progress": "false"})
    assert train(compose_train_config([*ov, "train.stop_after_steps=2"])).step == 2
    (ck,) = (tmp_path / "run" / "checkpoints").iterdir()
    damaged = ck / name
    damaged.write_bytes((10**12).to_bytes(8, "little") + b"{}")  # a header length past the end of the file
    with pytest.raises(UserError) as stop:
        train(compose_train_config(ov))
    message = str(stop.value)
    assert str(damaged) in message and "truncated" in message and f"delete {ck}" in message
