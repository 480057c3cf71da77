"""Cells, the unit of every result (docs/design.md §1, §7): (model, method, task, setting), and the hash
that says whether a stored cell is this one (config and weights).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthx.models.loading import weights_fingerprint
from lengthx.tasks import TASKS, Setting, resolve_settings

log = logging.getLogger("lengthx")


TEMPERATURE_METHODS = ("none", "fixed", "log", "pmax", "entropy", "prop1", "prop2")


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


# model config keys that only describe a model (paper A Table 2, paper B Table 1) and never change a number
DESCRIPTIVE_MODEL_KEYS = ("params",)


def hashed_model(cfg: DictConfig) -> dict[str, Any]:
    """``cfg.model`` as a cell's hash (and Algorithm 1's cache key) sees it: without descriptive keys."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    return {k: v for k, v in model.items() if k not in DESCRIPTIVE_MODEL_KEYS}


def config_hash(cfg: DictConfig, setting: Setting) -> str:
    """Hash of everything that decides a cell's numbers (not the results directory or device)."""
    relevant = {
        "model": hashed_model(cfg),
        "method": OmegaConf.to_container(cfg.method, resolve=True),
        "task": {k: v for k, v in OmegaConf.to_container(cfg.task, resolve=True).items() if k not in ("settings", "only")},
        "setting": [setting.label, setting.value, setting.unit],
        "dtype": cfg.dtype,
        "calibration": OmegaConf.to_container(cfg.calibration, resolve=True)
        if cfg.method.name in ("pmax", "entropy", "prop1", "prop2") else None,
    }
    if relevant["calibration"] is not None and getattr(TASKS.get(str(cfg.task.name)), "calibration_item", None):
        relevant["calibration"]["disjoint_from_evaluation"] = True  # docs/design.md §5 (lengthx.tasks.base)
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:12]


def cell_hash(cfg: DictConfig, setting: Setting, fingerprint: str | None = None) -> str:
    """A cell's identity in results.csv and its records: :func:`config_hash` and the weights it scored.

    ``fingerprint`` defaults to the weights at ``model.path``, so a checkpoint retrained at the same path
    starts its cells afresh instead of counting its predecessor's as done."""
    if fingerprint is None:
        fingerprint = weights_fingerprint(cfg.model.get("path"))
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
