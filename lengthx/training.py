"""Continued pre-training of paper B: full, chunk-α, prefix-α and domain adaptation (DA), on Accelerate.

Paper B §4 in code (docs/design.md §5):

- **Corpora** (§4.1): one document per sequence, no packing; documents longer than the source length are cut
  into non-overlapping pieces and the remainder is dropped (:func:`piece_dataset`). Sources: arXiv
  ``scientific_papers`` (paper profile), the Python standard library's own source files (mini profile, test
  files held out by a hash of their path), or any local text via ``data.files=``.
- **Methods** (§3.1, §4.3): chunk/prefix read pieces of L_e and train on L_t sampled tokens at their
  original positions (:mod:`lengthx.segmented`); full trains on whole L_e pieces; DA on whole L_t pieces.
- **Compute equivalence** (§4.4, eq. 2): every method processes the same number of tokens, one pass over
  the L_e corpus: chunk/prefix run L_e/L_t epochs of L_t-token sequences, full and DA one epoch.
- **Optimisation**: AdamW (no decay on biases and norms), linear warm-up then cosine decay to
  ``min_lr_ratio``·lr, gradient accumulation, gradient clipping, bf16 autocast on GPU.
- **Exact resume**: sequence k of the stream is piece ``order[k]`` (a seeded permutation per epoch) sampled
  with generator ``(seed, k)``, so the data never depends on where a run was interrupted. Checkpoints
  (model, optimizer, scheduler, every process's RNG states, and the step counter) are written atomically
  every ``train.save_every`` steps; rerunning the same command resumes from the newest one and the loss
  curve continues where it stopped. A checkpoint holds only safetensors (tensors) and JSON (everything
  else), so resuming a run directory copied from elsewhere never unpickles, i.e. never runs, anything in it
  (:func:`load_checkpoint`; docs/results.md).
- **Data-parallel**: ``accelerate launch --num_processes N -m lengthx.train_cli …`` splits every global
  batch across processes (rank r takes its own slice of each micro-batch), so N processes with batch b give
  the same run as one process with batch N·b (on a CPU-only box: ``--multi_gpu``, which starts gloo
  processes; see :mod:`lengthx.train_cli`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from lengthx.data.splits import is_test_document
from lengthx.errors import UserError
from lengthx.models.loading import weights_fingerprint
from lengthx.segmented import IGNORE_INDEX, SegmentMethod, collate_segmented, sample_generator
from lengthx.segmented_models import check_family, max_positions, prepare_for_length, segmented_forward

log = logging.getLogger("lengthx.train")

META_FILE = "lengthx_train.json"
SOURCES = ("stdlib", "files", "scientific_papers")
# model keys that decide the weights a run starts from (display names and notes may change freely)
_HASHED_MODEL_KEYS = ("name", "hub_id", "path", "family", "l_tr", "revision")
# knobs that do not change what is trained (left out of the run's config hash)
_UNHASHED_TRAIN_KEYS = (
    "output_dir",
    "overwrite",
    "save_every",
    "keep_checkpoints",
    "log_every",
    "stop_after_steps",
    "progress",
)


# =========================================================================================================
# Corpora
# =========================================================================================================
def _doc_order(doc_id: str) -> str:
    return hashlib.sha256(("order:" + doc_id).encode()).hexdigest()


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The ``.py`` files of the Python standard library (``sysconfig`` stdlib path, no site-packages)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    out = []
    for p in base.rglob("*.py"):
        rel = p.relative_to(base).parts
        if "site-packages" in rel or "dist-packages" in rel or "__pycache__" in rel:
            continue
        out.append(p)
    return sorted(out)


def _select(
    docs: list[tuple[str, Path]], split: str, test_percent: float, max_docs: int | None
) -> list[tuple[str, Path]]:
    if split not in ("train", "test"):
        raise ValueError(f"split must be train or test, got {split!r}")
    keep = [d for d in docs if is_test_document(d[0], test_percent) == (split == "test")]
    keep.sort(key=lambda d: _doc_order(d[0]))  # a fixed pseudo-random order, so max_docs is a fair sample
    return keep[:max_docs] if max_docs else keep


def _documents_dataset(items: list[tuple[str, str]]):
    from datasets import Dataset

    return Dataset.from_dict({"id": [i for i, _ in items], "text": [t for _, t in items]})


def stdlib_documents(
    split: str, test_percent: float = 10.0, max_docs: int | None = None, root: str | None = None
):
    """Mini-profile corpus: one document per standard-library source file; test files are held out."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    docs = [(str(p.relative_to(base)), p) for p in stdlib_files(base)]
    chosen = _select(docs, split, test_percent, max_docs)
    items = [(i, p.read_text(encoding="utf-8", errors="replace")) for i, p in chosen]
    return _documents_dataset(items)


def file_documents(
    files: list[str],
    split: str,
    test_percent: float = 10.0,
    max_docs: int | None = None,
    sample_by: str = "document",
    cache_dir: str | None = None,
):
    """Any local text, read with ``datasets.load_dataset("text", …)``.

    With ``sample_by=document`` each file is one document and files are split train/test by a hash of
    their path; with ``line``/``paragraph`` the rows of the files are the documents, split by a hash of
    (file, row). A single file as a single document cannot be split: pass several files, or
    ``sample_by=paragraph``.
    """
    from datasets import load_dataset

    paths = sorted(str(Path(f).expanduser().resolve()) for f in files)
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"data.files: no such file(s): {', '.join(missing)}")
    if sample_by == "document":
        chosen = _select([(p, Path(p)) for p in paths], split, test_percent, max_docs)
        if not chosen:
            return _documents_dataset([])
        ds = load_dataset(
            "text",
            data_files=[str(q) for _, q in chosen],
            sample_by="document",
            split="train",
            cache_dir=cache_dir,
        )
        return _documents_dataset([(i, row["text"]) for (i, _), row in zip(chosen, ds, strict=True)])
    items = []
    for p in paths:
        ds = load_dataset("text", data_files=[p], sample_by=sample_by, split="train", cache_dir=cache_dir)
        items += [(f"{p}#{n}", row["text"]) for n, row in enumerate(ds)]
    keep = [it for it in items if is_test_document(it[0], test_percent) == (split == "test")]
    keep.sort(key=lambda it: _doc_order(it[0]))
    return _documents_dataset(keep[:max_docs] if max_docs else keep)


def arxiv_documents(split: str, data_cfg: Any):
    """Paper-profile corpus: the arXiv part of ``scientific_papers`` (Cohan et al., 2018), field ``article``.

    Uses the dataset's own train/test splits (205k / 7k papers in paper B §4.1). Needs the hub or a local
    ``datasets`` cache; ``data.hf_path`` / ``data.hf_name`` / ``data.hf_revision`` select the copy (recent
    ``datasets`` releases load script-free copies only, e.g. the hub's parquet conversion).
    """
    from datasets import load_dataset

    path = data_cfg.get("hf_path") or "armanc/scientific_papers"
    name = data_cfg.get("hf_name") or "arxiv"
    field_name = data_cfg.get("text_field") or "article"
    kwargs: dict[str, Any] = {}
    if data_cfg.get("cache_dir"):
        kwargs["cache_dir"] = str(Path(data_cfg.cache_dir).expanduser() / "hf")
    if data_cfg.get("hf_revision"):
        kwargs["revision"] = data_cfg.hf_revision
    try:
        ds = load_dataset(path, name, split=split, **kwargs)
    except Exception as err:  # noqa: BLE001 - turn any loading failure into one actionable message
        raise RuntimeError(
            f"could not load {path} ({name}, split {split}): {type(err).__name__}: {err}. The paper profile "
            "needs the hub or a local datasets cache; try data.hf_revision=refs/convert/parquet, or point "
            "data.source=files data.files=[…] at local text."
        ) from err
    max_docs = data_cfg.get("max_docs")
    if max_docs:
        ds = ds.select(range(min(int(max_docs), len(ds))))
    ds = ds.map(
        lambda row, i: {"id": f"arxiv:{split}:{i}", "text": row[field_name]},
        with_indices=True,
        remove_columns=ds.column_names,
    )
    return ds


def resolve_source(data_cfg: Any, profile: str) -> str:
    """``auto`` → ``files`` when ``data.files`` is set, else stdlib (mini) or scientific_papers (paper)."""
    source = data_cfg.get("source") or "auto"
    if source == "auto":
        if data_cfg.get("files"):
            return "files"
        return "scientific_papers" if profile == "paper" else "stdlib"
    if source not in SOURCES:
        raise ValueError(f"unknown data.source={source!r}; valid: auto, {', '.join(SOURCES)}")
    return source


def load_documents(data_cfg: Any, split: str, profile: str = "mini"):
    """The documents of ``split`` as a ``datasets.Dataset`` with columns ``id`` and ``text``."""
    source = resolve_source(data_cfg, profile)
    test_percent = float(data_cfg.get("test_percent", 10))
    max_docs = data_cfg.get("max_docs")
    if source == "stdlib":
        return stdlib_documents(split, test_percent, max_docs, data_cfg.get("stdlib_root"))
    if source == "files":
        files = data_cfg.get("files")
        if not files:
            raise ValueError("data.source=files needs data.files=[path, …]")
        files = [files] if isinstance(files, str) else list(files)
        hf_cache = str(Path(data_cfg.cache_dir).expanduser() / "hf") if data_cfg.get("cache_dir") else None
        return file_documents(
            files, split, test_percent, max_docs, data_cfg.get("sample_by") or "document", hf_cache
        )
    return arxiv_documents(split, data_cfg)


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
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("LENGTHX_CACHE", Path.home() / ".cache" / "lengthx")) / "pieces"


def piece_dataset(data_cfg: Any, tokenizer: Any, split: str, length: int, profile: str = "mini"):
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


# =========================================================================================================
# Plan: compute-equivalent budgets (paper B §4.4, eq. 2)
# =========================================================================================================
@dataclass
class TrainPlan:
    """How much a run trains: the same token budget for every method (paper B §4.4)."""

    method: str
    l_t: int
    l_e: int
    source_length: int  # length of the corpus pieces read (L_e; L_t for DA)
    train_length: int  # length of the sequences the model sees (L_t; L_e for full)
    pieces: int
    epochs: float
    sequences: int  # sequences in the whole run (a multiple of the global batch)
    global_batch: int  # sequences per optimizer step, over all processes and accumulation steps
    steps: int
    tokens: int  # tokens processed by the whole run
    warmup_steps: int

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.train_length


def default_epochs(method: SegmentMethod, l_t: int, l_e: int) -> float:
    """Eq. 2: L_e / L_t epochs for chunk and prefix (L_t tokens per L_e piece); one for full and DA."""
    return l_e / l_t if method.segmented else 1.0


def make_plan(
    method: SegmentMethod,
    l_t: int,
    l_e: int,
    pieces: int,
    batch_size: int,
    grad_accum: int,
    world_size: int = 1,
    epochs: float | None = None,
    max_steps: int | None = None,
    warmup_ratio: float = 0.01,
    warmup_steps: int | None = None,
    budget_fraction: float = 1.0,
) -> TrainPlan:
    """Steps and sequences of a run; ``max_steps`` caps the run (the schedule follows the cap).

    ``budget_fraction`` scales the default epochs of every method alike (so budgets stay equal): 0.1 trains
    on a random tenth of the pieces, drawn from the whole corpus.
    """
    if l_e < l_t:
        raise ValueError(f"L_e={l_e} must be at least L_t={l_t}")
    ep = float(epochs) if epochs else default_epochs(method, l_t, l_e) * float(budget_fraction)
    global_batch = int(batch_size) * int(grad_accum) * int(world_size)
    total = int(round(ep * pieces))
    steps = total // global_batch
    if max_steps:
        steps = min(steps, int(max_steps)) if steps else 0
    if steps < 1:
        raise ValueError(
            f"the corpus gives {pieces} pieces of {method.source_length(l_t, l_e)} tokens: "
            f"{ep:g} epochs are {total} sequences, fewer than one global batch of {global_batch}; "
            "use more documents (data.max_docs), a smaller batch, or a shorter L_e"
        )
    warm = int(warmup_steps) if warmup_steps is not None else int(math.ceil(warmup_ratio * steps))
    train_len = method.train_length(l_t, l_e)
    return TrainPlan(
        method.name,
        l_t,
        l_e,
        method.source_length(l_t, l_e),
        train_len,
        pieces,
        ep,
        steps * global_batch,
        global_batch,
        steps,
        steps * global_batch * train_len,
        warm,
    )


def epoch_permutation(seed: int, epoch: int, pieces: int) -> torch.Tensor:
    """The piece order of one epoch (seeded; identical on every process and after every resume)."""
    return torch.randperm(pieces, generator=torch.Generator().manual_seed(int(seed) * 7919 + int(epoch)))


class SequenceOrder:
    """Sequence k of the run → piece index: epoch ⌊k/N⌋ of seeded permutations (cached per epoch)."""

    def __init__(self, seed: int, pieces: int):
        self.seed, self.pieces = int(seed), int(pieces)
        self._cache: dict[int, torch.Tensor] = {}

    def __call__(self, k: int) -> int:
        epoch, within = divmod(int(k), self.pieces)
        if epoch not in self._cache:
            self._cache = {epoch: epoch_permutation(self.seed, epoch, self.pieces)}
        return int(self._cache[epoch][within])


def micro_batch_indices(
    step: int, micro: int, rank: int, batch_size: int, grad_accum: int, world: int
) -> list[int]:
    """Global sequence indices of one process's micro-batch: step → accumulation slot → rank slice."""
    base = (step * grad_accum + micro) * batch_size * world + rank * batch_size
    return list(range(base, base + batch_size))


# =========================================================================================================
# Optimisation
# =========================================================================================================
class WarmupCosine:
    """LR multiplier: linear warm-up from 0 over ``warmup`` steps, then cosine decay to ``min_ratio``."""

    def __init__(self, warmup: int, total: int, min_ratio: float = 0.1):
        self.warmup, self.total, self.min_ratio = int(warmup), int(total), float(min_ratio)

    def __call__(self, step: int) -> float:
        if self.warmup and step < self.warmup:
            return (step + 1) / self.warmup
        span = max(1, self.total - self.warmup)
        progress = min(1.0, (step - self.warmup) / span)
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(
    model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], eps: float = 1e-8
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (biases and norm weights are not decayed)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.dim() < 2 or "norm" in name.lower() or name.endswith(".bias") else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the kept targets (fp32): logits[t] predicts labels[t+1]."""
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        labels[:, 1:].reshape(-1),
        ignore_index=IGNORE_INDEX,
    )


@dataclass
class TrainerState:
    """The counters a checkpoint restores (registered with Accelerate next to model and optimizer)."""

    step: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.tokens, self.seconds = (
            int(state["step"]),
            int(state["tokens"]),
            float(state["seconds"]),
        )


# =========================================================================================================
# Model
# =========================================================================================================
def load_for_training(model_cfg: Any, attn_implementation: str | None = None) -> tuple[Any, Any]:
    """(model in fp32 and train mode, tokenizer) from ``model.path``, the local cache or the hub."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lengthx.models.loading import _from_source

    family = str(model_cfg.family)
    check_family(family)
    attn = "eager" if family == "bloom" else (attn_implementation or "sdpa")
    path = model_cfg.get("path")
    tokenizer = _from_source(model_cfg.name, model_cfg.get("hub_id"), path, AutoTokenizer)
    model = _from_source(
        model_cfg.name,
        model_cfg.get("hub_id"),
        path,
        AutoModelForCausalLM,
        dtype=torch.float32,
        attn_implementation=attn,
    )
    model.train()
    return model, tokenizer


def source_meta(model_cfg: Any) -> dict[str, Any]:
    """The training meta of a checkpoint directory (``lengthx_train.json``), or {} for a stock model."""
    path = model_cfg.get("path") if model_cfg is not None else None
    if path and (Path(path) / META_FILE).is_file():
        return json.loads((Path(path) / META_FILE).read_text())
    return {}


# =========================================================================================================
# The run
# =========================================================================================================
@dataclass
class RunSpec:
    """Everything the loop needs, resolved from the Hydra config."""

    method: SegmentMethod
    label: str
    l_t: int
    l_e: int
    output_dir: Path
    config_hash: str
    config: dict[str, Any] = field(default_factory=dict)


def resolve_run(cfg: DictConfig) -> RunSpec:
    """Method, lengths, label, output directory and config hash of a ``lengthx train`` config."""
    check_family(str(cfg.model.family))
    alpha = cfg.get("alpha")
    if alpha is None:
        alpha = cfg.method.get("alpha")
    method = SegmentMethod.parse(str(cfg.method.name), alpha)
    l_t = int(cfg.get("l_t") or cfg.model.l_tr)
    if method.kind == "da":
        l_e = l_t
    elif cfg.get("l_e"):
        l_e = int(cfg.l_e)
    else:
        factor = float(cfg.get("l_e_factor") or 2)
        l_e = int(round(factor * l_t))
    if method.kind in ("chunk", "prefix", "full") and l_e <= l_t:
        raise ValueError(f"{method.name} extends the context: L_e={l_e} must exceed L_t={l_t}")
    if method.segmented:  # validate α against L_t and L_e before anything is loaded
        method.sample(l_e, l_t, torch.Generator().manual_seed(0))
    label = str(cfg.get("label") or method.name)
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    train_cfg = {k: v for k, v in container.get("train", {}).items() if k not in _UNHASHED_TRAIN_KEYS}
    model_part = {k: v for k, v in container["model"].items() if k in _HASHED_MODEL_KEYS}
    relevant = {
        "model": model_part,
        "method": method.name,
        "l_t": l_t,
        "l_e": l_e,
        "data": {k: v for k, v in container.get("data", {}).items() if k not in ("cache_dir", "num_proc")},
        "train": train_cfg,
        "seed": container.get("seed", 0),
        "profile": container.get("profile", {}).get("name", "mini"),
    }
    chash = hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:12]
    out = cfg.train.get("output_dir") or run_dir(str(relevant["profile"]), str(cfg.model.name), label, l_e / l_t)
    return RunSpec(method, label, l_t, l_e, Path(out), chash, relevant)


RUNS_DIR = Path(os.environ.get("LENGTHX_RUNS", "runs"))


def run_name(label: str, factor: float) -> str:
    """A run's directory name: its label and β = L_e/L_t, ``chunk-0.25-4x`` (DA: ``da-1x``)."""
    return f"{label}-{factor:g}x"


def run_dir(profile: str, model: str, label: str, factor: float) -> Path:
    """Default ``train.output_dir``: ``runs/<profile>/<model>/<label>-<β>x`` (``$LENGTHX_RUNS`` moves runs/)."""
    return RUNS_DIR / profile / model / run_name(label, factor)


@dataclass
class TrainResult:
    """What a finished (or stopped) run leaves behind."""

    output_dir: Path
    final_dir: Path | None
    plan: TrainPlan
    step: int
    resumed_from: int
    curve: list[dict[str, Any]]
    is_main: bool = True


def _checkpoints(out: Path) -> list[Path]:
    ck = out / "checkpoints"
    if not ck.is_dir():
        return []
    return sorted(p for p in ck.iterdir() if p.is_dir() and p.name.startswith("step-") and "." not in p.name)


def read_curve(out: Path) -> list[dict[str, Any]]:
    """The loss curve of a run (``curve.jsonl``; a torn last line is ignored)."""
    path = Path(out) / "curve.jsonl"
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _truncate_curve(out: Path, step: int) -> None:
    rows = [r for r in read_curve(out) if r["step"] <= step]
    tmp = out / "curve.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(out / "curve.jsonl")


def _precision(setting: str, device_type: str) -> str:
    if setting == "auto":
        return "bf16" if device_type == "cuda" else "no"
    if setting not in ("no", "bf16", "fp16"):
        raise ValueError(f"train.precision must be auto, no, bf16 or fp16, got {setting!r}")
    return setting


def train(cfg: DictConfig) -> TrainResult:
    """Run (or resume) one continued pre-training run described by a ``lengthx train`` config."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm

    spec = resolve_run(cfg)
    tc = cfg.train
    # accelerate logs every checkpoint file at INFO and notes the tied lm_head (GPT-2, BLOOM) at WARNING on
    # each save; the tie is restored on load (exact-resume tests check it), so keep only errors
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    logging.getLogger("accelerate.utils.other").setLevel(logging.ERROR)
    device = str(cfg.get("device") or "auto")
    cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    accelerator = Accelerator(
        cpu=cpu, mixed_precision=_precision(str(tc.get("precision", "auto")), "cpu" if cpu else "cuda")
    )
    set_seed(int(cfg.get("seed", 0)))
    model, tokenizer = load_for_training(cfg.model, tc.get("attn_implementation"))
    family = str(cfg.model.family)
    positions_info = prepare_for_length(model, family, spec.l_e)
    if tc.get("gradient_checkpointing", False):
        model.gradient_checkpointing_enable()
    profile = str(cfg.get("profile", {}).get("name", "mini"))
    with accelerator.main_process_first():  # tokenise once; the other processes read the cache
        pieces = piece_dataset(
            cfg.data, tokenizer, "train", spec.method.source_length(spec.l_t, spec.l_e), profile
        )
    world, rank = accelerator.num_processes, accelerator.process_index
    bs, ga = int(tc.batch_size), int(tc.grad_accum)
    plan = make_plan(
        spec.method,
        spec.l_t,
        spec.l_e,
        len(pieces),
        bs,
        ga,
        world,
        tc.get("epochs"),
        tc.get("max_steps"),
        float(tc.get("warmup_ratio", 0.01)),
        tc.get("warmup_steps"),
        float(tc.get("budget_fraction") or 1.0),
    )
    # the output directory is touched only once model, data and plan are known to be valid
    out = spec.output_dir
    main = accelerator.is_main_process
    if main:
        out.mkdir(parents=True, exist_ok=True)
        cfg_file = out / "train_config.json"
        base_weights = weights_fingerprint(cfg.model.get("path"))
        if cfg_file.exists():
            old = json.loads(cfg_file.read_text())
            other_config = old.get("config_hash") != spec.config_hash
            other_base = old.get("base_weights", base_weights) != base_weights  # runs before the field: unknown
            if other_config or other_base:
                if not tc.get("overwrite", False):
                    raise FileExistsError(
                        f"{out} holds a run with another configuration (hash {old.get('config_hash')} vs "
                        f"{spec.config_hash}); choose another train.output_dir or pass train.overwrite=true"
                        if other_config else
                        f"{out} was trained from other weights at {cfg.model.get('path')} (the base checkpoint "
                        "changed since); remove the run or pass train.overwrite=true to train it again"
                    )
                shutil.rmtree(out / "checkpoints", ignore_errors=True)
                (out / "curve.jsonl").unlink(missing_ok=True)
                shutil.rmtree(out / "final", ignore_errors=True)
        cfg_file.write_text(json.dumps(
            {"config_hash": spec.config_hash, "base_weights": base_weights, "config": spec.config}, indent=1, default=str
        ))
    accelerator.wait_for_everyone()
    done = out / "final" / META_FILE
    if done.is_file():  # a finished run of this very config: nothing to train or export again
        meta = json.loads(done.read_text())
        if meta.get("config_hash") == spec.config_hash and int(meta.get("steps", -1)) == plan.steps:
            log.info("%s is finished (%d steps); skipping", out, plan.steps)
            accelerator.end_training()
            return TrainResult(out, out / "final", plan, plan.steps, plan.steps, read_curve(out), main)
    optimizer = build_optimizer(
        model,
        float(tc.lr),
        float(tc.weight_decay),
        (float(tc.betas[0]), float(tc.betas[1])),
        float(tc.get("eps", 1e-8)),
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupCosine(plan.warmup_steps, plan.steps, float(tc.get("min_lr_ratio", 0.1)))
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    state = TrainerState()
    # the scheduler is stepped by hand once per optimizer step, so it is checkpointed beside, not prepared
    parts = CheckpointParts(accelerator, model, optimizer, schedule, state)

    resumed_from = 0
    ckpts = _checkpoints(out)
    if ckpts:
        load_checkpoint(ckpts[-1], parts)
        resumed_from = state.step
        log.info("resumed %s from %s (step %d of %d)", out, ckpts[-1].name, state.step, plan.steps)
    if main:
        _truncate_curve(out, state.step)
        (out / "plan.json").write_text(json.dumps(asdict(plan), indent=1))

    order = SequenceOrder(int(cfg.get("seed", 0)), plan.pieces)
    seed = int(cfg.get("seed", 0))
    stop_after = tc.get("stop_after_steps")
    save_every = int(tc.get("save_every") or 0)
    keep = int(tc.get("keep_checkpoints") or 2)
    bar = tqdm(
        total=plan.steps,
        initial=state.step,
        desc=f"train {spec.label}",
        unit="step",
        disable=not main or not tc.get("progress", True),
        dynamic_ncols=True,
    )
    window: list[tuple[float, int]] = []
    model.train()
    while state.step < plan.steps:
        if stop_after is not None and state.step >= int(stop_after):
            break  # simulated interruption (tests): leave without a final export
        t0 = time.time()
        step_loss = torch.zeros((), device=accelerator.device)
        for micro in range(ga):
            idx = micro_batch_indices(state.step, micro, rank, bs, ga, world)
            rows = pieces[[order(k) for k in idx]]["input_ids"].long()
            batch = collate_segmented(
                list(rows), spec.method, spec.l_t, [sample_generator(seed, k) for k in idx]
            )
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            sync = micro == ga - 1
            ctx = accelerator.no_sync(model) if not sync and world > 1 else nullcontext()
            with ctx:
                outputs = segmented_forward(
                    model, batch["input_ids"], batch["position_ids"], batch["attention_mask"]
                )
                loss = causal_lm_loss(outputs.logits, batch["labels"])
                accelerator.backward(loss / ga)
            step_loss += loss.detach() / ga
        if tc.get("max_grad_norm"):
            accelerator.clip_grad_norm_(model.parameters(), float(tc.max_grad_norm))
        lr = schedule.get_last_lr()[0]  # the LR this step uses
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        mean_loss = float(accelerator.reduce(step_loss, reduction="mean"))
        state.step += 1
        state.tokens += plan.tokens_per_step
        dt = time.time() - t0
        state.seconds += dt
        window = (window + [(dt, plan.tokens_per_step)])[-20:]
        tok_s = sum(n for _, n in window) / max(1e-9, sum(t for t, _ in window))
        if main:
            row = {
                "step": state.step,
                "loss": round(mean_loss, 6),
                "lr": lr,
                "tokens": state.tokens,
                "seconds": round(state.seconds, 3),
            }
            with open(out / "curve.jsonl", "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            bar.set_postfix(loss=f"{mean_loss:.4f}", tok_s=f"{tok_s:,.0f}", lr=f"{row['lr']:.2e}")
            bar.update(1)
        if save_every and (state.step % save_every == 0 or state.step == plan.steps):
            _save_checkpoint(parts, out, state.step, keep)
    bar.close()

    final_dir = None
    if state.step >= plan.steps:
        final_dir = out / "final"
        accelerator.wait_for_everyone()
        if main:
            unwrapped = accelerator.unwrap_model(model)
            tmp = out / "final.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            unwrapped.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            meta = {
                "method": spec.method.name,
                "label": spec.label,
                "alpha": spec.method.alpha,
                "l_t": spec.l_t,
                "l_e": spec.l_e,
                "l_e_factor": spec.l_e / spec.l_t,
                "family": family,
                "base_model": {
                    "name": str(cfg.model.name),
                    "hub_id": cfg.model.get("hub_id"),
                    "path": cfg.model.get("path"),
                },
                "base_meta": source_meta(cfg.model),
                "positions": positions_info,
                "max_positions": max_positions(unwrapped, family),
                "plan": asdict(plan),
                "steps": state.step,
                "tokens": state.tokens,
                "config_hash": spec.config_hash,
                "world_size": world,
            }
            (tmp / META_FILE).write_text(json.dumps(meta, indent=1, default=str))
            shutil.rmtree(final_dir, ignore_errors=True)
            os.replace(tmp, final_dir)
        accelerator.wait_for_everyone()
    accelerator.end_training()
    return TrainResult(out, final_dir, plan, state.step, resumed_from, read_curve(out) if main else [], main)


# =========================================================================================================
# Checkpoints: tensors in safetensors, everything else in JSON
# =========================================================================================================
CHECKPOINT_MODEL = "model.safetensors"
CHECKPOINT_OPTIMIZER = "optimizer.safetensors"
CHECKPOINT_STATE = "state.json"
_RNG_FILE = re.compile(r"rng-\d+\.json")
# Accelerate's save_state, as lengthx wrote checkpoints before they held only safetensors and JSON
_LEGACY_FILE = re.compile(r"model\.safetensors|optimizer\.bin|scaler\.pt|custom_checkpoint_[01]\.pkl|"
                          r"random_states_\d+\.pkl")


class CheckpointError(UserError, ValueError):
    """A checkpoint directory that a run does not resume from; the message names the file and the fix."""

    def __init__(self, problem: str, directory: Path):
        super().__init__(f"{problem}; delete {directory} to resume from the checkpoint before it (or to restart)")


@dataclass
class CheckpointParts:
    """What a checkpoint saves and restores: the (prepared) model and optimizer, scheduler and counters."""

    accelerator: Any
    model: Any
    optimizer: Any
    schedule: Any
    state: TrainerState


def _rng_state() -> dict[str, Any]:
    """This process's RNG states (Python, NumPy, torch CPU and CUDA) as JSON values."""
    version, keys, gauss = random.getstate()
    name, np_keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(keys), gauss], "numpy": [name, np_keys.tolist(), pos, has_gauss, cached],
            "torch": torch.get_rng_state().tolist(),
            "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else []}


def _set_rng_state(rng: dict[str, Any]) -> None:
    version, keys, gauss = rng["python"]
    random.setstate((version, tuple(keys), gauss))
    name, np_keys, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((name, np.asarray(np_keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(rng["torch"], dtype=torch.uint8))
    if rng.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in rng["cuda"]])


def save_checkpoint(directory: Path, parts: CheckpointParts) -> None:
    """Write a checkpoint into ``directory``: model weights and optimizer tensors as safetensors; the
    optimizer's other values, scheduler, counters, loss scaler and every process's RNG states as JSON."""
    from safetensors.torch import save_file, save_model

    acc = parts.accelerator
    (directory / f"rng-{acc.process_index}.json").write_text(json.dumps(_rng_state()))
    if not acc.is_main_process:
        return
    save_model(acc.unwrap_model(parts.model), str(directory / CHECKPOINT_MODEL))
    opt = parts.optimizer.state_dict()
    tensors, scalars = {}, {}
    for pid, values in opt["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{pid}/{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[name] = value
    save_file(tensors, str(directory / CHECKPOINT_OPTIMIZER))
    meta = {"trainer": parts.state.state_dict(), "scheduler": parts.schedule.state_dict(),
            "optimizer": {"param_groups": opt["param_groups"], "scalars": scalars},
            "scaler": acc.scaler.state_dict() if acc.scaler is not None else None}
    (directory / CHECKPOINT_STATE).write_text(json.dumps(meta, indent=1))


def load_checkpoint(directory: Path, parts: CheckpointParts) -> None:
    """Restore ``parts`` from a checkpoint of :func:`save_checkpoint`, reading only safetensors and JSON.

    Any other file in the directory is refused with :class:`CheckpointError` before anything is read: a file
    that is neither could run code when loaded (a pickle), and a run directory may come from someone else.
    A checkpoint in Accelerate's ``save_state`` layout (lengthx before this format) is read by
    :func:`_load_legacy_checkpoint`."""
    from safetensors.torch import load_file, load_model

    names = sorted(p.name for p in directory.iterdir())
    if CHECKPOINT_STATE not in names and "optimizer.bin" in names:
        _load_legacy_checkpoint(directory, names, parts)
        return
    allowed = {CHECKPOINT_MODEL, CHECKPOINT_OPTIMIZER, CHECKPOINT_STATE}
    _refuse_foreign(directory, [n for n in names if n not in allowed and not _RNG_FILE.fullmatch(n)])
    acc = parts.accelerator
    rng_file = f"rng-{acc.process_index}.json"
    missing = [n for n in (*sorted(allowed), rng_file) if n not in names]
    if missing:
        raise CheckpointError(f"{directory / missing[0]} is missing (an incomplete checkpoint)", directory)
    try:
        meta = json.loads((directory / CHECKPOINT_STATE).read_text())
        rng = json.loads((directory / rng_file).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"a JSON file of {directory} is damaged ({err})", directory) from None
    load_model(acc.unwrap_model(parts.model), str(directory / CHECKPOINT_MODEL), device="cpu")
    opt_state: dict[Any, dict[str, Any]] = {}
    for key, tensor in load_file(str(directory / CHECKPOINT_OPTIMIZER)).items():
        pid, name = key.split("/", 1)
        opt_state.setdefault(int(pid), {})[name] = tensor
    for pid, values in meta["optimizer"]["scalars"].items():
        opt_state.setdefault(int(pid), {}).update(values)
    parts.optimizer.load_state_dict({"state": opt_state, "param_groups": meta["optimizer"]["param_groups"]})
    parts.schedule.load_state_dict(meta["scheduler"])
    parts.state.load_state_dict(meta["trainer"])
    if meta.get("scaler") is not None and acc.scaler is not None:
        acc.scaler.load_state_dict(meta["scaler"])
    _set_rng_state(rng)


def _refuse_foreign(directory: Path, foreign: list[str]) -> None:
    if foreign:
        raise CheckpointError(
            f"{directory / foreign[0]} is not part of a lengthx checkpoint, which holds only safetensors and JSON "
            "files; refusing to load it (a pickle can run code when it is loaded). Delete that file if you trust "
            "the rest of the directory", directory)


def _load_legacy_checkpoint(directory: Path, names: list[str], parts: CheckpointParts) -> None:
    """Restore ``parts`` from an Accelerate ``save_state`` checkpoint, loading each file with
    ``torch.load(weights_only=True)``: tensors and plain containers only, anything that would run code is
    refused. Custom state 0 is the scheduler, 1 the counters (the order lengthx registered them in)."""
    from accelerate.utils import load as accelerate_load  # weights_only, plus NumPy's RNG-state types
    from safetensors.torch import load_model

    _refuse_foreign(directory, [n for n in names if not _LEGACY_FILE.fullmatch(n)])
    acc = parts.accelerator

    def read(name: str) -> Any:
        try:
            return accelerate_load(directory / name, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise CheckpointError(f"{directory / name} is missing (an incomplete checkpoint)", directory) from None
        except Exception as err:  # noqa: BLE001 - the weights-only unpickler refuses what could run code
            raise CheckpointError(f"{directory / name}: refusing to load it: it holds more than tensors and plain "
                                  f"values ({type(err).__name__})", directory) from None

    load_model(acc.unwrap_model(parts.model), str(directory / CHECKPOINT_MODEL), device="cpu")
    parts.optimizer.load_state_dict(read("optimizer.bin"))
    parts.schedule.load_state_dict(read("custom_checkpoint_0.pkl"))
    parts.state.load_state_dict(read("custom_checkpoint_1.pkl"))
    if acc.scaler is not None and "scaler.pt" in names:
        acc.scaler.load_state_dict(read("scaler.pt"))
    states = read(f"random_states_{acc.process_index}.pkl")
    random.setstate(states["random_state"])
    np.random.set_state(states["numpy_random_seed"])
    torch.set_rng_state(states["torch_manual_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])


def _save_checkpoint(parts: CheckpointParts, out: Path, step: int, keep: int) -> None:
    """:func:`save_checkpoint` into ``step-N.tmp`` then rename: a kill mid-save never leaves a half checkpoint."""
    accelerator = parts.accelerator
    ck = out / "checkpoints"
    final = ck / f"step-{step:07d}"
    tmp = ck / f"step-{step:07d}.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        ck.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    tmp.mkdir(parents=True, exist_ok=True)
    save_checkpoint(tmp, parts)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in _checkpoints(out)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def iter_curve(out: Path) -> Iterator[tuple[int, float]]:
    """(step, loss) pairs of a run's curve."""
    for r in read_curve(out):
        yield int(r["step"]), float(r["loss"])


def main_summary(result: TrainResult) -> str:
    """One paragraph on a run, for the CLI."""
    last = result.curve[-1] if result.curve else {}
    where = f"final model: {result.final_dir}" if result.final_dir else f"stopped at step {result.step}"
    resumed = f", resumed from step {result.resumed_from}" if result.resumed_from else ""
    return (
        f"{result.plan.method}: {result.step}/{result.plan.steps} steps, {last.get('tokens', 0):,} tokens, "
        f"loss {last.get('loss', float('nan')):.4f}{resumed}; {where}"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `lengthx train …` or `python -m lengthx.train_cli …`")
