"""How much a paper-B run trains and where it lives (paper B §4.4, eq. 2; docs/design.md §5).

Every method processes the same number of tokens, one pass over the L_e corpus: chunk/prefix run L_e/L_t
epochs of L_t-token sequences, full and DA one epoch (:func:`make_plan`). Sequence k of the stream is piece
``order[k]`` (a seeded permutation per epoch), so the data never depends on where a run was interrupted.
:func:`resolve_run` reads method, lengths, label, output directory and config hash from a
``lengthx train`` config.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from lengthx.config import CONF_DIR, TRAIN_CONFIG, check_output_place, portable
from lengthx.segmented.models import check_family
from lengthx.segmented.sampling import SegmentMethod

log = logging.getLogger("lengthx.train")


META_FILE = "lengthx_train.json"


# model keys that decide the weights a run starts from (display names and notes may change freely); a local
# checkpoint is known by its path, so paper models that share a mini stand-in share its runs
_HASHED_MODEL_KEYS = ("name", "hub_id", "path", "family", "l_tr", "revision")
_LOCAL_MODEL_KEYS = ("path", "family", "l_tr")

OOTB = "ootb"  # paper B §4.3: the domain-adapted checkpoint every other method starts from
PRETRAINED = "pretrained"  # the published checkpoint itself (profile=mini: the shipped mini)


# knobs that do not change what is trained (left out of the run's config hash)
_UNHASHED_TRAIN_KEYS = (
    "output_dir",
    "overwrite",
    "save_every",
    "keep_checkpoints",
    "log_every",
    "log_with",
    "stop_after_steps",
    "progress",
)


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


def source_meta(model_cfg: Any) -> dict[str, Any]:
    """The training meta of a checkpoint directory (``lengthx_train.json``), or {} for a stock model."""
    path = model_cfg.get("path") if model_cfg is not None else None
    if path and (Path(path) / META_FILE).is_file():
        return json.loads((Path(path) / META_FILE).read_text())
    return {}


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
    variant: dict[str, Any] = field(default_factory=dict)  # keys that differ from the profile's (differs_from_profile)


def run_owner(model_cfg: Any) -> str:
    """The model directory of its runs under ``runs/<profile>/``: the mini's name when a paper model runs as its
    shipped stand-in (``gpt2`` and ``gpt2-xl`` both train mini-gpt2 in the mini profile), else the model's."""
    mini, path = model_cfg.get("mini"), model_cfg.get("path")
    if mini and path and Path(str(path)).name == str(mini) and Path(str(path)).parent.name == "checkpoints":
        return str(mini)
    return str(model_cfg.name)


def start_point(cfg: DictConfig) -> str:
    """Where a ``lengthx train`` run starts: ``start=`` or the method's ``start`` (``ootb`` unless it is OOTB)."""
    start = str(cfg.get("start") or cfg.method.get("start") or PRETRAINED)
    if start not in (OOTB, PRETRAINED):
        raise ValueError(f"start={start!r}: valid starts are {OOTB} (the model's OOTB run) and {PRETRAINED}")
    return start


def ootb_dir(cfg: DictConfig) -> Path:
    """The export of the model's OOTB run (``runs/<profile>/<model>/ootb-1x/final``)."""
    profile = str(cfg.get("profile", {}).get("name", "mini"))
    return run_dir(profile, run_owner(cfg.model), OOTB, 1) / "final"


def _start_from_ootb(cfg: DictConfig) -> None:
    """Point ``model.path`` at the OOTB export (paper B §4.3) or say how to make it."""
    final = ootb_dir(cfg)
    if not (final / META_FILE).is_file():
        alpha = cfg.get("alpha") or cfg.method.get("alpha")
        name = cfg.method.get("label") or (f"{cfg.method.name}-{alpha:g}" if alpha else cfg.method.name)
        raise FileNotFoundError(
            f"method={name} starts from model {cfg.model.name}'s OOTB run "
            f"(paper B §4.3), but {final} does not exist: run `lengthx train model={cfg.model.name} method=ootb` "
            f"first (or pass start={PRETRAINED} to start from the published checkpoint)")
    with open_dict(cfg):
        cfg.model.path = str(final)


def resolve_run(cfg: DictConfig) -> RunSpec:
    """Method, lengths, label, output directory and config hash of a ``lengthx train`` config.

    A run that starts from the OOTB model has ``model.path`` set to that export here."""
    check_family(str(cfg.model.family))
    owner = run_owner(cfg.model)
    if start_point(cfg) == OOTB:
        _start_from_ootb(cfg)
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
    label = str(cfg.get("label") or cfg.method.get("label") or method.name)
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    train_cfg = {k: v for k, v in container.get("train", {}).items() if k not in _UNHASHED_TRAIN_KEYS}
    keys = _LOCAL_MODEL_KEYS if container["model"].get("path") else _HASHED_MODEL_KEYS
    model_part = {k: v for k, v in container["model"].items() if k in keys}
    relevant = {
        "model": model_part,
        "method": method.name,
        "epochs": cfg.method.get("epochs"),
        "l_t": l_t,
        "l_e": l_e,
        "data": {k: v for k, v in container.get("data", {}).items() if k not in ("cache_dir", "num_proc")},
        "train": train_cfg,
        "seed": container.get("seed", 0),
        "profile": container.get("profile", {}).get("name", "mini"),
    }
    chash = hashlib.sha256(json.dumps(portable(relevant), sort_keys=True, default=str).encode()).hexdigest()[:12]
    variant = differs_from_profile(train_cfg, relevant["seed"], str(relevant["profile"]))
    given = cfg.train.get("output_dir")
    if given is not None:
        check_output_place(str(given), "train.output_dir", "pass train.output_dir= a directory of its own, or drop "
                           "it for the default runs/<profile>/<model>/<run>")
    out = given or run_dir(str(relevant["profile"]), owner, label, l_e / l_t, variant)
    return RunSpec(method, label, l_t, l_e, Path(out), chash, relevant, variant)


def profile_train_defaults(profile: str) -> tuple[dict[str, Any], Any]:
    """The ``train`` section and ``seed`` a ``lengthx train`` of ``profile`` has when no ``train.*`` or ``seed``
    is given: ``conf/train.yaml``'s, with the profile's ``train:`` entries over it."""
    base = OmegaConf.load(CONF_DIR / f"{TRAIN_CONFIG}.yaml")
    prof_path = CONF_DIR / "profile" / f"{profile}.yaml"
    prof = OmegaConf.load(prof_path) if prof_path.is_file() else OmegaConf.create({})
    train = OmegaConf.merge(base.get("train") or {}, prof.get("train") or {})
    container = OmegaConf.to_container(train, resolve=True)
    assert isinstance(container, dict)
    return container, base.get("seed", 0)


def differs_from_profile(train_cfg: dict[str, Any], seed: Any, profile: str) -> dict[str, Any]:
    """The budget, schedule and optimiser keys (``train.*`` that enter the run's hash, and ``seed``) whose values
    differ from the profile's: a run with any gets its own directory (:func:`run_dir`), so a smoke run with
    ``train.max_steps=10`` never takes the place of the profile's run of the same method."""
    defaults, default_seed = profile_train_defaults(profile)
    out = {f"train.{k}": v for k, v in sorted(train_cfg.items())
           if k not in _UNHASHED_TRAIN_KEYS and defaults.get(k) != v}
    if seed != default_seed:
        out["seed"] = seed
    return out


RUNS_DIR = Path(os.environ.get("LENGTHX_RUNS", "runs"))


def run_name(label: str, factor: float, variant: dict[str, Any] | None = None) -> str:
    """A run's directory name: its label and β = L_e/L_t, ``chunk-0.25-4x`` (DA: ``da-1x``); a run whose budget or
    schedule differs from the profile's (``variant``, :func:`differs_from_profile`) adds a short hash of those
    keys and values, ``ootb-1x~3f9a1c``."""
    name = f"{label}-{factor:g}x"
    if variant:
        name += "~" + hashlib.sha256(json.dumps(variant, sort_keys=True, default=str).encode()).hexdigest()[:6]
    return name


def run_dir(profile: str, model: str, label: str, factor: float, variant: dict[str, Any] | None = None) -> Path:
    """Default ``train.output_dir``: ``runs/<profile>/<model>/<label>-<β>x[~hash]`` (``$LENGTHX_RUNS`` moves runs/)."""
    return RUNS_DIR / profile / model / run_name(label, factor, variant)
