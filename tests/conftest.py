"""Shared fixtures: tiny models built from configs (no network, no downloads)."""

from __future__ import annotations

import pytest
import torch
from transformers import T5Config, T5ForConditionalGeneration

from lengthx.attention.temperature import ATTN_NAME, register


def tiny_t5(attn: str = ATTN_NAME, seed: int = 0, **overrides) -> T5ForConditionalGeneration:
    """A 2-layer T5 with learned relative buckets, random weights, eval mode."""
    register()
    cfg = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
               relative_attention_num_buckets=32, relative_attention_max_distance=64, dropout_rate=0.0,
               decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(T5Config(**cfg))
    # random init gives near-zero relative bias; make it visible so position effects are tested
    with torch.no_grad():
        model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.normal_(0, 2.0)
    model.config._attn_implementation = attn
    model.set_attn_implementation(attn)
    return model.eval()


@pytest.fixture
def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two sequences of lengths 40 and 27 (right padded), and decoder inputs."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 64, (2, 40), generator=g)
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 27:] = 0
    ids[1, 27:] = 0
    dec = torch.randint(3, 64, (2, 6), generator=g)
    return ids, mask, dec


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A tiny T5 with a byte-level tokenizer, saved like a hub checkpoint (for CLI and runner tests)."""
    from transformers import ByT5Tokenizer

    path = tmp_path_factory.mktemp("tiny-t5")
    model = tiny_t5(attn="sdpa", vocab_size=384, d_model=32, num_heads=2, d_kv=16)
    model.save_pretrained(path)
    ByT5Tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread (on a shared 2-core box more threads only spin).

    Use per module with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
