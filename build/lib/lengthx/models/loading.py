"""Model loading (docs/design.md §4): a hub id or ``model.path``; dtype and device; always ``.eval()``.

Weights come from ``model.path`` when given, else the local Hugging Face cache, else the hub when it is
reachable. When none has them, :class:`ModelNotAvailable` names the model, its hub id and ``model.path=``,
instead of a stack trace of connection errors. A ``model.path`` directory is checked before anything loads
(:func:`check_checkpoint_dir`): config, tokenizer and every weight shard present, no shard truncated.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from lengthx.attention.temperature import register as register_attention
from lengthx.errors import UserError
from lengthx.models.families import Family, get_family

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # either one makes a loadable tokenizer directory


class ModelNotAvailable(UserError, RuntimeError):
    """The weights are neither at ``model.path``, nor in the local cache, nor reachable on the hub (or the
    directory at ``model.path`` is incomplete)."""


@dataclass
class LoadedModel:
    """A ready-to-run model: weights in eval mode, its tokenizer, family adapter and config entry."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    family: Family
    l_tr: int
    device: torch.device


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` picks cuda > mps > cpu; anything else is passed to ``torch.device``."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device} was requested but no CUDA device is visible; use device=cpu or auto")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` is bf16 on GPU and fp32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype={dtype!r}; use auto, float32, bfloat16 or float16") from None


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face endpoint answers a TCP connection (honours HF_HUB_OFFLINE and HF_ENDPOINT)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _safetensors_problem(path: Path) -> str | None:
    """Why a ``.safetensors`` file cannot be whole (cut short, or a header that does not parse), or None.

    The format is an 8-byte header length, a JSON header giving each tensor's byte range, then the data: the
    file must be as long as its header says."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"is truncated ({size} bytes, shorter than a safetensors header)"
        n = int.from_bytes(head, "little")
        if n > size - 8:
            return f"is truncated ({size:,} bytes; its header alone needs {n + 8:,})"
        try:
            header = json.loads(fh.read(n))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError):
            return "has a damaged header (not a safetensors file)"
    if size < 8 + n + end:
        return f"is truncated ({size:,} bytes; its header says {8 + n + end:,})"
    return None


def check_checkpoint_dir(path: str | Path, name: str) -> None:
    """Raise :class:`ModelNotAvailable` naming the first missing or damaged file of a checkpoint directory.

    A directory written by ``save_pretrained`` holds ``config.json``, a tokenizer (``tokenizer.json`` or
    ``tokenizer_config.json``) and its weights: ``model.safetensors``, or every shard listed by
    ``model.safetensors.index.json`` (``pytorch_model.bin`` files are only checked to exist)."""
    root = Path(path)
    fix = ("point model.path= at a complete checkpoint directory (written by save_pretrained), or copy or "
           "download it again")
    if not root.is_dir():
        raise ModelNotAvailable(f"model '{name}': model.path={path} is not a directory; {fix}")
    if not (root / "config.json").is_file():
        raise ModelNotAvailable(f"model '{name}': {root / 'config.json'} is missing (model.path={path} is empty or "
                                f"incomplete); {fix}")
    if not any((root / f).is_file() for f in TOKENIZER_FILES):
        raise ModelNotAvailable(f"model '{name}': model.path={path} has no tokenizer ({' or '.join(TOKENIZER_FILES)}"
                                f"); {fix}")
    shards: list[str] = []
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (root / index).is_file():
            try:
                shards = sorted(set(json.loads((root / index).read_text())["weight_map"].values()))
            except (ValueError, KeyError, AttributeError):
                raise ModelNotAvailable(f"model '{name}': {root / index} is damaged (no weight_map); {fix}") from None
            break
    else:
        shards = [f for f in ("model.safetensors", "pytorch_model.bin") if (root / f).is_file()][:1]
    if not shards:
        raise ModelNotAvailable(f"model '{name}': model.path={path} has no weights (model.safetensors or "
                                f"model.safetensors.index.json); {fix}")
    for shard in shards:
        file = root / shard
        if not file.is_file():
            raise ModelNotAvailable(f"model '{name}': weight shard {file} is missing; {fix}")
        problem = _safetensors_problem(file) if file.suffix == ".safetensors" else None
        if problem:
            raise ModelNotAvailable(f"model '{name}': weight shard {file} {problem}; {fix}")


def from_source(name: str, hub_id: str | None, path: str | None, loader: Any, **kwargs: Any) -> Any:
    """Load with ``loader.from_pretrained`` from ``path``, the local cache, then the hub, in that order."""
    if path:
        check_checkpoint_dir(path, name)
        return loader.from_pretrained(path, **kwargs)
    if not hub_id:
        raise ModelNotAvailable(f"model '{name}' has no hub id and no model.path; set model.path=/local/dir")
    try:
        return loader.from_pretrained(hub_id, local_files_only=True, **kwargs)
    except OSError:
        pass
    if hub_reachable():
        try:
            return loader.from_pretrained(hub_id, **kwargs)
        except OSError:
            pass
    raise ModelNotAvailable(
        f"model '{name}' (hub id {hub_id}) is not available: the Hugging Face hub is unreachable or does not "
        f"have it, and it is not in the local cache. Download it on a machine with hub access "
        f"(hf download {hub_id}) and copy the cache, or pass model.path=/dir/with/{name}."
    )


def load_model(
    model_cfg: Any, device: str = "auto", dtype: str = "auto", attention: Any | None = None
) -> LoadedModel:
    """Load the model described by a ``conf/model`` entry (keys: name, hub_id, path, family, l_tr, large).

    ``attention`` (config ``attention``: efficient, min_length, backend) selects the memory-efficient T5
    encoder attention of ``lengthx.attention.t5_bias``; default ``auto`` (used above 2048 tokens).
    """
    family = get_family(model_cfg.family)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    register_attention()
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "attn_implementation": family.attn_implementation}
    if model_cfg.get("large", False) and dev.type == "cuda":
        kwargs["device_map"] = "auto"
    loader = AutoModelForSeq2SeqLM if family.encoder_decoder else AutoModelForCausalLM
    path = model_cfg.get("path")
    tokenizer = from_source(model_cfg.name, model_cfg.get("hub_id"), path, AutoTokenizer)
    model = from_source(model_cfg.name, model_cfg.get("hub_id"), path, loader, **kwargs)
    if "device_map" not in kwargs:
        model = model.to(dev)
    model.eval()
    if family.name == "t5":
        from lengthx.attention.t5_bias import enable_efficient_t5

        att = attention or {}
        enable_efficient_t5(model, mode=att.get("efficient", "auto"), min_length=int(att.get("min_length", 2048)),
                            backend=att.get("backend", "auto"))
    return LoadedModel(model_cfg.name, model, tokenizer, family, int(model_cfg.l_tr), dev)


def weights_fingerprint(path: str | None) -> str:
    """Hash of a local checkpoint's weight files (name, size, first and last MiB); "" for a hub model."""
    if not path or not Path(path).is_dir():
        return ""
    h = hashlib.sha256()
    for p in sorted(q for q in Path(path).iterdir() if q.suffix in (".safetensors", ".bin")):
        size = p.stat().st_size
        h.update(f"{p.name}:{size}".encode())
        with open(p, "rb") as fh:
            h.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:12]


# the files of a checkpoint directory besides its weights that decide what it computes: architecture, generation
# defaults, shard index and tokenizer (read in full; absent ones are skipped)
CHECKPOINT_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json",
                    "pytorch_model.bin.index.json", "tokenizer.json", "tokenizer_config.json",
                    "special_tokens_map.json", "added_tokens.json", "spiece.model", "vocab.json", "merges.txt",
                    "vocab.txt")
# keys of those JSON files that say where and with what a checkpoint was saved, not what it computes
SAVED_BY_KEYS = ("_name_or_path", "name_or_path", "transformers_version")


def model_fingerprint(path: str | None) -> str:
    """What a local checkpoint is, by content only (docs/design.md §7): its :data:`CHECKPOINT_FILES` and its
    weights (:func:`weights_fingerprint`); "" for a hub model.

    Where the directory lies never enters, so a copy of the repository at another path (or the same
    checkpoint downloaded elsewhere) has the same fingerprint, while a retrained checkpoint, an edited
    ``config.json`` or another tokenizer does not."""
    if not path or not Path(path).is_dir():
        return ""
    h = hashlib.sha256()
    for name in CHECKPOINT_FILES:
        p = Path(path) / name
        if not p.is_file():
            continue
        data = p.read_bytes()
        if p.suffix == ".json":
            obj = json.loads(data)
            if isinstance(obj, dict):
                obj = {k: v for k, v in obj.items() if k not in SAVED_BY_KEYS}
            data = json.dumps(obj, sort_keys=True).encode()
        h.update(f"{name}:{len(data)}:".encode())
        h.update(data)
    h.update(f"weights:{weights_fingerprint(path)}".encode())
    return h.hexdigest()[:12]
