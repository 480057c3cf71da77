"""The hash schemes of earlier versions of lengthx (docs/design.md §7), as ``scripts/migrate_hashes.py`` recomputes
them to find a stored cell's current hash:

- **v1**: the checkout's absolute ``model.path`` in the hash, the weights by name, size, first and last MiB;
- **v2**: the model's config without its path, the checkpoint by its config, tokenizer and weight files' size,
  first and last MiB, and ``task.num_examples`` in the hash.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lengthx.cli.recipes import ALIGNED_METHODS  # noqa: E402
from lengthx.config import PACKAGE_DIR, portable  # noqa: E402
from lengthx.core.cells import MODEL_UNHASHED_KEYS  # noqa: E402
from lengthx.models.loading import model_fingerprint, weights_fingerprint  # noqa: E402
from lengthx.segmented.plan import source_meta  # noqa: E402
from lengthx.tasks import TASKS, Setting  # noqa: E402

# keys the models' configs gained after the schemes below: left out of an old hash
NEW_MODEL_KEYS = ("trust_remote_code",)


def container(node: Any) -> dict[str, Any]:
    """A config node (or a mapping) as a plain dict, resolved."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)


# ---- v1: the checkout's path in the hash ---------------------------------------------------------------------
def legacy_model(model_cfg: Any, old_package_dir: Path) -> dict[str, Any]:
    """The model as v1 hashes held it: the whole resolved config, a checkpoint inside the package at
    ``old_package_dir`` (where the old checkout's ``lengthx/`` was)."""
    model = {k: v for k, v in container(model_cfg).items() if k not in NEW_MODEL_KEYS}
    path = model.get("path")
    if path and Path(str(path)).is_relative_to(PACKAGE_DIR):
        model["path"] = str(Path(old_package_dir) / Path(str(path)).relative_to(PACKAGE_DIR))
    return model


def legacy_config_hash(cfg: DictConfig, setting: Setting, old_package_dir: Path) -> str:
    """:func:`lengthx.core.cells.config_hash` as v1 computed it in a checkout whose package was at
    ``old_package_dir``."""
    relevant = {
        "model": legacy_model(cfg.model, old_package_dir),
        "method": container(cfg.method),
        "task": {k: v for k, v in container(cfg.task).items() if k not in ("settings", "only")},
        "setting": [setting.label, setting.value, setting.unit],
        "dtype": cfg.dtype,
        "calibration": container(cfg.calibration) if cfg.method.name in ALIGNED_METHODS else None,
    }
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:12]


def legacy_cell_hash(cfg: DictConfig, setting: Setting, fingerprint: str, old_package_dir: Path) -> str:
    """The v1 :func:`lengthx.core.cells.cell_hash`; ``fingerprint`` is v1's (:func:`legacy_fingerprint`)."""
    return hashlib.sha256(f"{legacy_config_hash(cfg, setting, old_package_dir)}|{fingerprint}".encode()).hexdigest()[:12]


def legacy_fingerprint(cfg: DictConfig, perplexity: bool) -> str:
    """v1's fingerprint of the scored checkpoint: its weight files only (paper B: after the run's hash)."""
    weights = weights_fingerprint(cfg.model.get("path"))
    return f"{_run_stamp(cfg)}:{weights}" if perplexity else weights


def _run_stamp(cfg: DictConfig) -> str:
    meta = source_meta(cfg.model)
    return f"{meta.get('config_hash', '')}:{meta.get('steps', '')}" if meta else ""


# ---- v2: portable, the weights by size, first and last MiB, the example count in the hash ---------------------
V2_TASK_UNHASHED_KEYS = ("settings", "only", "description")


def v2_config_hash(cfg: DictConfig, setting: Setting) -> str:
    """:func:`lengthx.core.cells.config_hash` as v2 computed it: ``task.num_examples`` in, no path."""
    model = {k: v for k, v in container(cfg.model).items() if k not in (*MODEL_UNHASHED_KEYS, *NEW_MODEL_KEYS)}
    relevant = {
        "model": portable(model),
        "method": container(cfg.method),
        "task": {k: v for k, v in container(cfg.task).items() if k not in V2_TASK_UNHASHED_KEYS},
        "setting": [setting.label, setting.value, setting.unit],
        "dtype": cfg.dtype,
        "calibration": container(cfg.calibration) if cfg.method.name in ALIGNED_METHODS else None,
    }
    if relevant["calibration"] is not None and getattr(TASKS.get(str(cfg.task.name)), "calibration_item", None):
        relevant["calibration"]["disjoint_from_evaluation"] = True
    return hashlib.sha256(json.dumps(portable(relevant), sort_keys=True, default=str).encode()).hexdigest()[:12]


def v2_fingerprint(cfg: DictConfig, perplexity: bool) -> str:
    """v2's fingerprint of the scored checkpoint: its config and tokenizer files, its weight files' size, first
    and last MiB (paper B: after the run's hash)."""
    content = model_fingerprint(cfg.model.get("path"), weights=weights_fingerprint)
    return f"{_run_stamp(cfg)}:{content}" if perplexity else content


def v2_cell_hash(cfg: DictConfig, setting: Setting, fingerprint: str) -> str:
    """The v2 :func:`lengthx.core.cells.cell_hash`; ``fingerprint`` is v2's (:func:`v2_fingerprint`)."""
    return hashlib.sha256(f"{v2_config_hash(cfg, setting)}|{fingerprint}".encode()).hexdigest()[:12]
