"""Model loading (docs/design.md §4): a hub id or ``model.path``; dtype and device; always ``.eval()``.

Weights come from ``model.path`` when given, else the local Hugging Face cache, else the hub when it is
reachable. When none has them, :class:`ModelNotAvailable` names the model, its hub id and ``model.path=``,
instead of a stack trace of connection errors. A ``model.path`` directory is checked before anything loads:
its files (:func:`check_checkpoint_dir`: config, tokenizer and every weight shard present, no shard truncated,
``config.json`` JSON, no ``auto_map`` unless ``model.trust_remote_code=true``) and what they hold
(:func:`check_model_dir`: the family the config names, tensor shapes against the config, the tokenizer's
vocabulary against the embeddings). Nothing is ever loaded with ``trust_remote_code`` unless the model config
says so: Python code shipped in a model directory is not run.

A checkpoint enters a cell's identity by content (:func:`model_fingerprint`): every weight file is hashed in
full (SHA-256), once per file version (path, size, mtime, ctime, inode; :data:`DIGESTS`).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Callable
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
from lengthx.models.model_types import family_model_types

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # either one makes a loadable tokenizer directory
# an embedding matrix may be padded past the tokenizer's vocabulary, up to this multiple (T5: 32100 → 32128,
# Pythia: 50277 → 50304, BLOOM: 250680 → 250880); more rows than that belong to another tokenizer
VOCAB_PADDING = 512


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


def safetensors_problem(path: Path) -> str | None:
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


def read_json_file(path: Path, name: str) -> Any:
    """A checkpoint's JSON file, or :class:`ModelNotAvailable` naming the file and where it stops parsing."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        why = f"holds byte 0x{err.object[err.start]:02x}, which is not UTF-8 text"
    except json.JSONDecodeError as err:
        why = f"is not JSON ({err.msg} at line {err.lineno}, column {err.colno})"
    raise ModelNotAvailable(f"model '{name}': {path} {why}; restore it from the checkpoint's source (a "
                            "save_pretrained directory holds it as written), or point model.path= at a complete "
                            "checkpoint directory")


def remote_code_problem(root: Path, name: str) -> str | None:
    """Why ``root`` would run its own Python code when loaded (an ``auto_map`` entry of its config or tokenizer
    config, naming modules in the directory), or None."""
    for file in ("config.json", "tokenizer_config.json"):
        if not (root / file).is_file():
            continue
        data = read_json_file(root / file, name)
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        if auto_map:
            code = sorted({str(v if isinstance(v, str) else next((x for x in v if x), "")).split(".")[0]
                           for v in (auto_map.values() if isinstance(auto_map, dict) else [auto_map])} - {""})
            return (f"model '{name}': {root / file} has an auto_map: loading it would run Python code from the "
                    f"directory ({', '.join(f'{c}.py' for c in code) or 'its modules'}), which lengthx does not do "
                    f"by default. Fix: use a checkpoint of a built-in transformers architecture, or, only if you "
                    f"trust that code, pass model.trust_remote_code=true")
    return None


def check_checkpoint_dir(path: str | Path, name: str, trust_remote_code: bool = False) -> None:
    """Raise :class:`ModelNotAvailable` naming the first missing or damaged file of a checkpoint directory.

    A directory written by ``save_pretrained`` holds ``config.json``, a tokenizer (``tokenizer.json`` or
    ``tokenizer_config.json``) and its weights: ``model.safetensors``, or every shard listed by
    ``model.safetensors.index.json`` (``pytorch_model.bin`` files are only checked to exist). A config that is
    not JSON is named, and so is an ``auto_map`` (code in the directory) unless ``trust_remote_code``."""
    root = Path(path)
    fix = ("point model.path= at a complete checkpoint directory (written by save_pretrained), or copy or "
           "download it again")
    if not root.is_dir():
        raise ModelNotAvailable(f"model '{name}': model.path={path} is not a directory; {fix}")
    if not (root / "config.json").is_file():
        raise ModelNotAvailable(f"model '{name}': {root / 'config.json'} is missing (model.path={path} is empty or "
                                f"incomplete); {fix}")
    if not isinstance(read_json_file(root / "config.json", name), dict):
        raise ModelNotAvailable(f"model '{name}': {root / 'config.json'} is not a JSON object; {fix}")
    if not any((root / f).is_file() for f in TOKENIZER_FILES):
        raise ModelNotAvailable(f"model '{name}': model.path={path} has no tokenizer ({' or '.join(TOKENIZER_FILES)}"
                                f"); {fix}")
    problem = None if trust_remote_code else remote_code_problem(root, name)
    if problem:
        raise ModelNotAvailable(problem)
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
        problem = safetensors_problem(file) if file.suffix == ".safetensors" else None
        if problem:
            raise ModelNotAvailable(f"model '{name}': weight shard {file} {problem}; {fix}")


def from_source(name: str, hub_id: str | None, path: str | None, loader: Any, **kwargs: Any) -> Any:
    """Load with ``loader.from_pretrained`` from ``path``, the local cache, then the hub, in that order.

    ``trust_remote_code`` is False unless given: a directory or hub repository that needs its own Python code
    is refused instead of run."""
    kwargs["trust_remote_code"] = bool(kwargs.get("trust_remote_code", False))
    if path:
        check_checkpoint_dir(path, name, trust_remote_code=kwargs["trust_remote_code"])
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


def load_tokenizer(model_cfg: Any) -> PreTrainedTokenizerBase:
    """The tokenizer of a ``conf/model`` entry alone (no weights): from ``model.path``, the cache or the hub."""
    return from_source(model_cfg.name, model_cfg.get("hub_id"), model_cfg.get("path"), AutoTokenizer,
                       trust_remote_code=bool(model_cfg.get("trust_remote_code", False)))


def load_model(
    model_cfg: Any, device: str = "auto", dtype: str = "auto", attention: Any | None = None
) -> LoadedModel:
    """Load the model described by a ``conf/model`` entry (keys: name, hub_id, path, family, l_tr, large).

    ``attention`` (config ``attention``: efficient, min_length, backend, stats_backend) selects the memory-efficient T5
    encoder attention of ``lengthx.attention.t5_bias``; default ``auto`` (used above 2048 tokens). A
    ``model.path`` directory is checked first (:func:`check_model_dir`).
    """
    family = get_family(model_cfg.family)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    register_attention()
    trust = bool(model_cfg.get("trust_remote_code", False))
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "attn_implementation": family.attn_implementation,
                              "trust_remote_code": trust}
    if model_cfg.get("large", False) and dev.type == "cuda":
        kwargs["device_map"] = "auto"
    loader = AutoModelForSeq2SeqLM if family.encoder_decoder else AutoModelForCausalLM
    path = model_cfg.get("path")
    if path:
        check_model_dir(model_cfg)
    tokenizer = from_source(model_cfg.name, model_cfg.get("hub_id"), path, AutoTokenizer, trust_remote_code=trust)
    model = from_source(model_cfg.name, model_cfg.get("hub_id"), path, loader, **kwargs)
    if "device_map" not in kwargs:
        model = model.to(dev)
    model.eval()
    if family.name == "t5":
        from lengthx.attention.t5_bias import enable_efficient_t5

        att = attention or {}
        enable_efficient_t5(model, mode=att.get("efficient", "auto"), min_length=int(att.get("min_length", 2048)),
                            backend=att.get("backend", "auto"), stats_backend=att.get("stats_backend", "auto"))
    return LoadedModel(model_cfg.name, model, tokenizer, family, int(model_cfg.l_tr), dev)


# ---- what a checkpoint directory holds ------------------------------------------------------------------------
def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape from a ``.safetensors`` header (nothing else is read)."""
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    return {k: tuple(int(d) for d in t["shape"]) for k, t in header.items() if k != "__metadata__"}


def weight_files(root: Path) -> list[Path]:
    """The weight files of a checkpoint directory (every ``.safetensors`` and ``.bin`` file)."""
    return sorted(q for q in root.iterdir() if q.suffix in (".safetensors", ".bin") and q.is_file())


_CHECKED: dict[tuple[str, bool, str], str] = {}  # (model.path, trust, family) → model_fingerprint it was checked at


def check_model_dir(model_cfg: Any) -> None:
    """Raise :class:`ModelNotAvailable` when ``model.path`` cannot be the model the config describes, naming the
    file and the fix: its files (:func:`check_checkpoint_dir`), a ``model_type`` of another family than
    ``model.family``, a tensor whose shape is not the one ``config.json`` gives it, or a tokenizer whose vocabulary
    or special tokens do not fit the embeddings (``len(tokenizer)`` above the embedding rows, or below them by
    more than :data:`VOCAB_PADDING`'s rounding). Checked once per checkpoint content in a process."""
    from transformers import AutoConfig

    name, path, family = str(model_cfg.name), str(model_cfg.path), get_family(str(model_cfg.family))
    trust = bool(model_cfg.get("trust_remote_code", False))
    root = Path(path)
    check_checkpoint_dir(root, name, trust_remote_code=trust)
    fingerprint = model_fingerprint(path)
    if _CHECKED.get((path, trust, family.name)) == fingerprint:  # the family too: another family's check is not this
        return
    data = read_json_file(root / "config.json", name)
    model_type = str(data.get("model_type", ""))
    allowed = family_model_types(family.name)
    if model_type not in allowed:
        raise ModelNotAvailable(
            f"model '{name}': {root / 'config.json'} is a {model_type or 'model without a model_type'} checkpoint, "
            f"but model '{name}' is of family {family.name} (model.family), which loads {', '.join(allowed)}. "
            f"Fix: point model.path= at a {family.name} checkpoint, or pick a model of family {model_type} "
            "(lengthx ls)")
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
    _check_shapes(root, name, config, family.encoder_decoder, trust)
    _check_vocabulary(root, name, config, trust)
    _CHECKED[(path, trust, family.name)] = fingerprint


def _check_shapes(root: Path, name: str, config: Any, encoder_decoder: bool, trust: bool) -> None:
    """Every tensor of the ``.safetensors`` shards has the shape a model built from ``config.json`` gives it."""
    loader = AutoModelForSeq2SeqLM if encoder_decoder else AutoModelForCausalLM
    with torch.device("meta"):
        model = loader.from_config(config, trust_remote_code=trust)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    prefix = f"{model.base_model_prefix}." if model.base_model_prefix else ""
    matched = 0
    for file in (f for f in weight_files(root) if f.suffix == ".safetensors"):
        for key, shape in safetensors_shapes(file).items():
            want = expected.get(key, expected.get(prefix + key))
            if want is None:
                continue
            matched += 1
            if want != shape:
                raise ModelNotAvailable(
                    f"model '{name}': {file} holds {key} with shape {list(shape)}, but {root / 'config.json'} "
                    f"makes it {list(want)}: the weights and config.json are of different models. Fix: restore the "
                    "config.json saved with these weights, or point model.path= at a matching checkpoint")
    if matched == 0 and any(f.suffix == ".safetensors" for f in weight_files(root)):
        raise ModelNotAvailable(f"model '{name}': no tensor of {root}'s weight files is one of the "
                                f"{config.model_type} model {root / 'config.json'} describes; point model.path= at "
                                "a matching checkpoint")


def _check_vocabulary(root: Path, name: str, config: Any, trust: bool) -> None:
    """The tokenizer fits the embeddings: no id past them, no more than :data:`VOCAB_PADDING` rounding of unused
    rows, and the same pad / end-of-sequence ids as the model's config."""
    tokenizer = AutoTokenizer.from_pretrained(str(root), trust_remote_code=trust)
    rows = getattr(config, "vocab_size", None)
    size = len(tokenizer)
    if rows is None:
        return
    padded = -(-size // VOCAB_PADDING) * VOCAB_PADDING
    fix = ("Fix: put the tokenizer saved with these weights into model.path (tokenizer.json, tokenizer_config.json), "
           "or point model.path= at a complete checkpoint")
    if size > rows or rows > padded:
        raise ModelNotAvailable(f"model '{name}': the tokenizer in {root} has {size} entries but the model has "
                                f"{rows} embeddings (config.json vocab_size): they are not one model's. {fix}")
    for token in ("pad_token_id", "eos_token_id"):
        mine, theirs = getattr(tokenizer, token, None), getattr(config, token, None)
        if isinstance(theirs, list):
            theirs = theirs[0] if theirs else None
        if mine is not None and theirs is not None and int(mine) != int(theirs):
            raise ModelNotAvailable(f"model '{name}': the tokenizer in {root} has {token}={mine} but config.json "
                                    f"says {theirs}: they are not one model's. {fix}")


# ---- what a checkpoint is, by content ---------------------------------------------------------------------------
# SHA-256 of weight files by file version: "path|size|mtime_ns|ctime_ns|inode|device" → hex digest. Filled as
# files are hashed; a results directory keeps it across runs (lengthx.core.store.ResultsStore.digests).
DIGESTS: dict[str, str] = {}


def file_version(path: Path) -> str:
    """The key of one version of a file: its resolved path, size, modification and change times, inode and
    device. Rewriting a file (even to the same size, with its mtime set back) changes its ctime."""
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|{st.st_dev}"


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's whole content, computed once per version (:data:`DIGESTS`)."""
    key = file_version(path)
    digest = DIGESTS.get(key)
    if digest is None:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                h.update(block)
        digest = DIGESTS[key] = h.hexdigest()
    return digest


def weights_digest(path: str | None) -> str:
    """Hash of a local checkpoint's weight files, each read in full (:func:`file_sha256`); "" for a hub model."""
    if not path or not Path(path).is_dir():
        return ""
    h = hashlib.sha256()
    for p in weight_files(Path(path)):
        h.update(f"{p.name}:{p.stat().st_size}:{file_sha256(p)}".encode())
    return h.hexdigest()[:12]


def weights_fingerprint(path: str | None) -> str:
    """A quick stamp of a local checkpoint's weight files (name, size, first and last MiB); "" for a hub model.

    It keys ``lengthx train``'s claim on its output directory; a cell's identity hashes the weights in full
    (:func:`weights_digest`)."""
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


def model_fingerprint(path: str | None, weights: Callable[[str | None], str] | None = None) -> str:
    """What a local checkpoint is, by content only (docs/design.md §7): its :data:`CHECKPOINT_FILES` (the
    tokenizer among them) and its weights (``weights``, default :func:`weights_digest`: every byte); "" for a
    hub model.

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
            obj = read_json_file(p, Path(path).name)
            if isinstance(obj, dict):
                obj = {k: v for k, v in obj.items() if k not in SAVED_BY_KEYS}
            data = json.dumps(obj, sort_keys=True).encode()
        h.update(f"{name}:{len(data)}:".encode())
        h.update(data)
    h.update(f"weights:{(weights or weights_digest)(path)}".encode())
    return h.hexdigest()[:12]
