"""Tokenised corpus pieces (paper B §4.1): one document per sequence, no packing; documents longer than the
piece length are cut into non-overlapping pieces and the remainder is dropped. Cached on disk, keyed by the
data config, split, length and tokenizer vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from lengthx.data.corpora import cache_root, file_sha256, load_documents, resolve_source

if TYPE_CHECKING:
    from datasets import Dataset

log = logging.getLogger("lengthx.train")


def split_pieces(token_ids: list[int], length: int) -> list[list[int]]:
    """Non-overlapping pieces of exactly ``length`` tokens; the remainder is dropped (paper B §4.1)."""
    return [token_ids[i : i + length] for i in range(0, len(token_ids) - length + 1, length)]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of a tokenizer's class and vocabulary (keys the piece cache)."""
    vocab = sorted(tokenizer.get_vocab().items())
    blob = json.dumps([type(tokenizer).__name__, vocab], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _cache_root(data_cfg: Any) -> Path:
    explicit = data_cfg.get("cache_dir")
    return Path(explicit).expanduser() if explicit else cache_root(data_cfg) / "pieces"


def piece_dataset(data_cfg: Any, tokenizer: Any, split: str, length: int, profile: str = "mini") -> Dataset:
    """Tokenised ``length``-token pieces of ``split`` (torch format, column ``input_ids``), cached on disk.

    Documents are tokenised without special tokens, cut into non-overlapping pieces, the remainder dropped;
    one document per piece. The cache key covers the data config, split, length and tokenizer vocabulary.
    """
    from datasets import Dataset, Features, Sequence, Value, load_from_disk

    source = resolve_source(data_cfg, profile)
    keyed = {
        k: v
        for k, v in OmegaConf.to_container(OmegaConf.create(dict(data_cfg)), resolve=True).items()
        if k not in ("cache_dir", "num_proc")
    }
    if source == "archive" and Path(str(data_cfg.archive)).expanduser().is_file():  # cache follows the archive's contents, not its path
        keyed["archive"] = file_sha256(str(data_cfg.archive))
    key = hashlib.sha256(
        json.dumps(
            [keyed, source, split, int(length), tokenizer_fingerprint(tokenizer)], sort_keys=True, default=str
        ).encode()
    ).hexdigest()[:16]
    path = _cache_root(data_cfg) / f"{source}-{split}-{length}-{key}"
    if (path / "dataset_info.json").exists():
        return load_from_disk(str(path)).with_format("torch")
    docs = load_documents(data_cfg, split, profile)

    def cut(batch: dict[str, list]) -> dict[str, list]:
        enc = tokenizer(batch["text"], add_special_tokens=False, verbose=False)["input_ids"]
        out: dict[str, list] = {"doc_id": [], "piece": [], "input_ids": []}
        for doc_id, ids in zip(batch["id"], enc, strict=True):
            for n, piece in enumerate(split_pieces(ids, length)):
                out["doc_id"].append(doc_id)
                out["piece"].append(n)
                out["input_ids"].append(piece)
        return out

    features = Features(
        {
            "doc_id": Value("string"),
            "piece": Value("int32"),
            "input_ids": Sequence(Value("int32"), length=length),
        }
    )
    if len(docs) == 0:
        pieces = Dataset.from_dict({"doc_id": [], "piece": [], "input_ids": []}, features=features)
    else:
        num_proc = data_cfg.get("num_proc")
        pieces = docs.map(
            cut,
            batched=True,
            batch_size=32,
            remove_columns=docs.column_names,
            features=features,
            num_proc=int(num_proc) if num_proc and len(docs) > 1 else None,
            desc=f"tokenising {split} into {length}-token pieces",
        )
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    pieces.save_to_disk(str(tmp))
    if path.exists():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        try:
            os.replace(tmp, path)
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    return load_from_disk(str(path)).with_format("torch")
