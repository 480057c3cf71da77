"""Paper B's loop loss chunked over the sequence (docs/design.md §5): the same loss and gradients as whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_bloom, tiny_gpt2, tiny_neox
from conftest import train_overrides as overrides
from safetensors.torch import load_file

import lengthx.segmented.loss as loss_mod
from lengthx.cli.train import compose_train_config
from lengthx.segmented.loop import causal_lm_loss as reexported
from lengthx.segmented.loop import read_curve, train
from lengthx.segmented.loss import (
    causal_lm_loss,
    chunked_causal_lm_loss,
    loss_chunk_positions,
    micro_batch_loss,
)
from lengthx.segmented.models import prepare_for_length, segmented_forward
from lengthx.segmented.sampling import IGNORE_INDEX

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILIES = {"gpt2": tiny_gpt2, "gpt_neox": tiny_neox, "bloom": tiny_bloom}
B, L, V = 2, 11, 64  # 10 targets a row: chunks of 3 positions are 3, 3, 3 and a ragged 1


def _model(family: str) -> torch.nn.Module:
    model = FAMILIES[family](seed=1)
    prepare_for_length(model, family, 48)
    return model


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, L), generator=g)
    positions = torch.stack([torch.sort(torch.randperm(40, generator=g)[:L]).values for _ in range(B)])
    labels = ids.clone()
    labels[0, 2:5] = IGNORE_INDEX  # a prefix-α-like row: some targets not scored
    labels[1, -1] = IGNORE_INDEX
    return {"input_ids": ids, "position_ids": positions, "attention_mask": torch.ones_like(ids), "labels": labels}


def _loss_and_grads(model: torch.nn.Module, loss: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), grads


@pytest.mark.parametrize("family", list(FAMILIES))
def test_final_hidden_state_gives_the_logits_and_logits_to_keep_skips_them(family):
    model, batch = _model(family), _batch()
    whole = segmented_forward(model, batch["input_ids"], batch["position_ids"], batch["attention_mask"])
    out = segmented_forward(model, batch["input_ids"], batch["position_ids"], batch["attention_mask"],
                            output_hidden_states=True, logits_to_keep=1)
    assert whole.logits.shape == (B, L, V) and out.logits.shape == (B, 1, V)
    projected = model.get_output_embeddings()(out.hidden_states[-1])
    torch.testing.assert_close(projected, whole.logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_chunked_loss_and_gradients_equal_the_whole(family):
    model, batch = _model(family), _batch()
    head = model.get_output_embeddings()
    limit = B * V * 3  # 3 positions a chunk
    assert loss_chunk_positions(B, L, V, limit) == 3 and loss_chunk_positions(B, L, V, B * L * V) is None
    out = segmented_forward(model, batch["input_ids"], batch["position_ids"], batch["attention_mask"])
    whole, whole_grads = _loss_and_grads(model, causal_lm_loss(out.logits, batch["labels"]))
    chunked, chunked_grads = _loss_and_grads(model, micro_batch_loss(model, head, batch, limit=limit))
    assert whole == pytest.approx(chunked, abs=1e-5)
    assert whole_grads.keys() == chunked_grads.keys() and len(whole_grads) == len(list(model.parameters()))
    for name, grad in whole_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("chunk", [1, 4, 10, 64])
def test_chunked_loss_is_the_mean_over_kept_targets(chunk):
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(B, L, 8, generator=g, requires_grad=True)
    weight = torch.randn(V, 8, generator=g, requires_grad=True)
    bias = torch.randn(V, generator=g, requires_grad=True)
    labels = _batch()["labels"]
    whole = causal_lm_loss(torch.nn.functional.linear(hidden, weight, bias), labels)
    grads = torch.autograd.grad(whole, (hidden, weight, bias))
    chunked = chunked_causal_lm_loss(hidden, weight, labels, chunk, bias)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-5)
    for got, want in zip(torch.autograd.grad(chunked, (hidden, weight, bias)), grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_the_loop_trains_the_same_with_a_chunked_loss(models, corpus, tmp_path, monkeypatch):
    """Through ``lengthx train`` (``_Loop.step``): forcing chunks gives the whole loss's curve and weights."""
    assert reexported is causal_lm_loss  # the minis and benches import it from the loop
    common = {"train.max_steps": 3, "train.grad_accum": 2, "train.lr": 1e-3}
    whole = train(compose_train_config(overrides(models, corpus, tmp_path, method="prefix-0.5", out="a", **common)))
    calls = []

    def spy(hidden, weight, labels, chunk, bias=None):
        calls.append((tuple(hidden.shape), tuple(weight.shape), chunk))
        return chunked_causal_lm_loss(hidden, weight, labels, chunk, bias)

    vocab = json.loads((Path(models["gpt2"]) / "config.json").read_text())["vocab_size"]
    monkeypatch.setattr(loss_mod, "LOGITS_CHUNK_ELEMENTS", 2 * vocab * 5)  # batch 2: 5 positions a chunk
    monkeypatch.setattr(loss_mod, "chunked_causal_lm_loss", spy)
    chunked = train(compose_train_config(overrides(models, corpus, tmp_path, method="prefix-0.5", out="b",
                                                   **common)))
    assert len(calls) == 3 * 2 and all(c[1][0] == vocab and c[2] == 5 for c in calls)
    assert [r["step"] for r in chunked.curve] == [r["step"] for r in whole.curve] == [1, 2, 3]
    for a, b in zip(whole.curve, chunked.curve, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    wa, wb = load_file(whole.final_dir / "model.safetensors"), load_file(chunked.final_dir / "model.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-5, msg=k)


LAUNCHER = """
import runpy, sys
import lengthx.segmented.loss as loss

loss.LOGITS_CHUNK_ELEMENTS, marker = int(sys.argv.pop(1)), sys.argv.pop(1)
whole = loss.chunked_causal_lm_loss

def spy(*args, **kwargs):
    with open(marker, "a") as fh:
        fh.write(f"{args[3]}\\n")
    return whole(*args, **kwargs)

loss.chunked_causal_lm_loss = spy
runpy.run_module("lengthx.cli.train", run_name="__main__")
"""


@pytest.mark.slow
def test_two_processes_with_a_chunked_loss_match_one_whole(models, corpus, tmp_path):
    """``accelerate launch --num_processes 2`` (DDP, gloo on CPU) with the loss chunked: the output embedding used
    outside the wrapped forward still gets its gradient reduced, so the curve is one process's whole-loss curve."""
    accelerate = Path(sys.executable).with_name("accelerate")
    common = {"train.max_steps": 3, "train.grad_accum": 2, "hydra.run.dir": tmp_path / "hydra"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    (tmp_path / "launch.py").write_text(LAUNCHER)
    vocab = json.loads((Path(models["gpt2"]) / "config.json").read_text())["vocab_size"]
    marker = tmp_path / "chunks.txt"
    cmd = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", str(tmp_path / "launch.py"), str(vocab * 5),
           str(marker), *overrides(models, corpus, tmp_path, out="ddp", **common, **{"train.batch_size": 1})]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker.read_text().split() == ["5"] * (2 * 3 * 2)  # 2 processes x 3 steps x 2 micro-batches
    single = train(compose_train_config(overrides(models, corpus, tmp_path, out="one", **common)))
    ddp = read_curve(tmp_path / "ddp")
    assert [r["step"] for r in ddp] == [1, 2, 3]
    assert all(abs(a["loss"] - b["loss"]) < 1e-4 for a, b in zip(ddp, single.curve, strict=True))
    wa, wb = load_file(single.final_dir / "model.safetensors"), load_file(tmp_path / "ddp/final/model.safetensors")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-5, msg=k)
