"""How a mini's weights leave its trainer (docs/design.md, "The minis' trainers"): fp16 safetensors in shards of at
most 12 MB (small enough for any file limit), its config and generation config, and the tokenizer, in a directory
``from_pretrained`` loads. The training copy is left untouched (fp32, on its device)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


def export_fp16(model: PreTrainedModel, tok: PreTrainedTokenizerBase, path: Path) -> None:
    """Write ``model`` in fp16 and ``tok`` to ``path`` (created if absent)."""
    path.mkdir(parents=True, exist_ok=True)
    half = type(model)(model.config)
    half.load_state_dict({k: v.detach().float().cpu() for k, v in model.state_dict().items()})
    half.generation_config = model.generation_config
    half.to(torch.float16).save_pretrained(str(path), max_shard_size="12MB")
    tok.save_pretrained(str(path))
