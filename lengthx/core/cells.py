"""Cells, the unit of every result (docs/design.md §1, §7): (model, method, task, setting), and the hash
that says whether a stored cell is this one (config and weights).

A hash holds what decides a cell's numbers and nothing about where they were computed: the model enters by
its config without ``path`` (and without the prose that only labels it), its checkpoint by content
(:func:`lengthx.models.loading.model_fingerprint`). A clone of the repository at any path, or an install,
finds the committed cells done.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthx.config import portable
from lengthx.models.loading import model_fingerprint
from lengthx.tasks import TASKS, Setting, resolve_settings

log = logging.getLogger("lengthx")


# τ methods: paper A's, and the scaling rules of YaRN, LongRoPE, Qwen (logn) and SSMax (lengthx.attention.scaling)
TEMPERATURE_METHODS = ("none", "fixed", "log", "pmax", "entropy", "prop1", "prop2", "yarn", "longrope", "logn", "ssmax")


# methods a cell can run: temperatures, plus truncation (keep the last L_tr tokens; paper A Tables 6, 12-13)
RUNNABLE_METHODS = (*TEMPERATURE_METHODS, "truncation")


@dataclass
class Cell:
    """One table cell to compute."""

    model: str
    method: str
    task: str
    setting: Setting

    @property
    def key(self) -> str:
        return f"{self.model}|{self.method}|{self.task}|{self.setting.label}"


def method_id(method_cfg: Any) -> str:
    """A method's name in results: ``fixed`` carries its τ, a non-default scope/search is appended."""
    name = method_cfg.name
    if name == "fixed":
        name = f"fixed-{float(method_cfg.tau):g}"
    if method_cfg.get("scope", "encoder") != "encoder":
        name += f"-scope={method_cfg.scope}"
    if name in ("pmax", "entropy") and method_cfg.get("per_layer", False):
        name += "-per-layer"
    if name.startswith(("pmax", "entropy")) and method_cfg.get("search", "grid") != "grid":
        name += f"-{method_cfg.search}"
    return name


# model keys that say where a checkpoint lies or how the model is labelled, not what it computes: the checkpoint
# itself enters a cell's hash by content (model_fingerprint)
MODEL_UNHASHED_KEYS = ("path", "description", "display", "paper_role", "paper_b_role", "trained_by",
                       "params")  # params: descriptive (paper A Table 2, paper B Table 1)
# task keys that pick settings (a cell is one setting) or describe the task
TASK_UNHASHED_KEYS = ("settings", "only", "description")
# task keys added after cells were computed whose unset value (null) is what those cells ran: a null one stays out
# of the hash, so adding the key leaves every existing cell's hash as it was
TASK_OPTIONAL_KEYS = ("testcases_dir",)


def model_identity(model_cfg: Any) -> dict[str, Any]:
    """The model as it enters a cell's hash and Algorithm 1's cache key: its resolved config without
    :data:`MODEL_UNHASHED_KEYS`."""
    container = OmegaConf.to_container(model_cfg, resolve=True) if isinstance(model_cfg, DictConfig) \
        else dict(model_cfg)
    return portable({k: v for k, v in container.items() if k not in MODEL_UNHASHED_KEYS})


def config_hash(cfg: DictConfig, setting: Setting) -> str:
    """Hash of everything in the config that decides a cell's numbers (not the results directory, the device,
    where the checkpoint lies, or where the checkout lies: :func:`portable`)."""
    relevant = {
        "model": model_identity(cfg.model),
        "method": OmegaConf.to_container(cfg.method, resolve=True),
        "task": {k: v for k, v in OmegaConf.to_container(cfg.task, resolve=True).items()
                 if k not in TASK_UNHASHED_KEYS and not (k in TASK_OPTIONAL_KEYS and v is None)},
        "setting": [setting.label, setting.value, setting.unit],
        "dtype": cfg.dtype,
        "calibration": OmegaConf.to_container(cfg.calibration, resolve=True)
        if cfg.method.name in ("pmax", "entropy", "prop1", "prop2") else None,
    }
    if relevant["calibration"] is not None and getattr(TASKS.get(str(cfg.task.name)), "calibration_item", None):
        relevant["calibration"]["disjoint_from_evaluation"] = True  # docs/design.md §5 (lengthx.tasks.base)
    return hashlib.sha256(json.dumps(portable(relevant), sort_keys=True, default=str).encode()).hexdigest()[:12]


def cell_hash(cfg: DictConfig, setting: Setting, fingerprint: str | None = None) -> str:
    """A cell's identity in results.csv and its records: :func:`config_hash` and the checkpoint it scored.

    ``fingerprint`` defaults to the content of the checkpoint at ``model.path``
    (:func:`lengthx.models.loading.model_fingerprint`), so a checkpoint retrained at the same path starts its
    cells afresh instead of counting its predecessor's as done, and the same checkpoint at another path counts
    them done."""
    if fingerprint is None:
        fingerprint = model_fingerprint(cfg.model.get("path"))
    return hashlib.sha256(f"{config_hash(cfg, setting)}|{fingerprint}".encode()).hexdigest()[:12]


def experiment_skip_reason(cfg: DictConfig) -> str | None:
    """Why this job of an experiment sweep is not a cell of its table, or ``None`` when it is.

    Hydra's basic sweeper runs the product of its parameters; ``experiment_info.methods_of`` restricts a
    model to some methods (paper A Table 4: LongChat is a baseline row, method ``none`` only)."""
    info = cfg.get("experiment_info") or {}
    allowed = (info.get("methods_of") or {}).get(cfg.model.name)
    if allowed is not None and cfg.method.name not in allowed:
        return (f"{cfg.model.name} × method={cfg.method.name} is not a cell of experiment "
                f"{info.get('name', '?')}: {cfg.model.name} runs only method={','.join(allowed)}")
    return None


def planned_cells(cfg: DictConfig, stats: bool = False) -> list[Cell]:
    """The cells ``lengthx run`` (``lengthx stats`` when ``stats``) would compute, without loading a model.

    Settings come from the task config, the profile and ``model.l_tr`` (docs/design.md §3); statistics add the
    length-L_tr reference setting (paper A Tables 1, 7)."""
    if experiment_skip_reason(cfg) is not None:
        return []
    if not stats and cfg.method.name not in RUNNABLE_METHODS:
        raise ValueError(f"method {cfg.method.name!r} is not runnable by lengthx run; runnable: "
                         f"{', '.join(RUNNABLE_METHODS)}")
    l_tr = int(cfg.model.l_tr)
    settings = resolve_settings(cfg.task, cfg.profile.name, l_tr)
    if stats:
        settings = [Setting("L_tr", l_tr, "tokens"), *settings]
    method = "stats" if stats else method_id(cfg.method)
    return [Cell(cfg.model.name, method, cfg.task.name, s) for s in settings]
