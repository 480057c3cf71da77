"""Where the Hydra configs live and how a run's config is composed (``conf/``, one root for ``lengthx``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lengthx.errors import UsageError

PACKAGE_DIR = Path(__file__).resolve().parent


CONF_DIR = Path(os.environ.get("LENGTHX_CONF", PACKAGE_DIR.parent / "conf")).resolve()


def register_resolvers() -> None:
    """``${lengthx_pkg:checkpoints/mini-t5}``: a path inside the installed package (the shipped minis)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("lengthx_pkg"):
        OmegaConf.register_new_resolver("lengthx_pkg", lambda rel: str(PACKAGE_DIR / rel))


def compose(overrides: list[str], conf_dir: Path = CONF_DIR, config_name: str = "config") -> Any:
    """The config ``lengthx run <overrides>`` composes (before ``profile=mini`` maps models onto minis)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


GROUPS = ("model", "method", "task", "profile", "experiment")


def choices(group: str, groups: dict[str, Path] | None = None) -> list[str]:
    """Config names of ``group`` (the YAML files of its directory)."""
    folder = (groups or {})[group] if groups else CONF_DIR / group
    return sorted(p.stem for p in folder.glob("*.yaml"))


def check_overrides(overrides: list[str], groups: dict[str, Path] | None = None, command: str = "run") -> None:
    """Fail fast on unknown config-group choices (``task=pasky``), listing the valid names.

    ``groups`` maps group names to their config directories (default: ``conf/<group>`` for :data:`GROUPS`).
    """
    names = groups if groups is not None else dict.fromkeys(GROUPS)
    for ov in overrides:
        if "=" not in ov or ov.startswith("-"):
            continue
        key, value = ov.split("=", 1)
        key = key.lstrip("+~").removeprefix("override ")
        if key not in names:
            continue
        valid = choices(key, groups)
        for v in value.split(","):
            if v and v not in valid:
                raise UsageError(f"unknown {key} '{v}' for lengthx {command}. Valid {key} names: "
                                 f"{', '.join(valid)}. See 'lengthx ls' for one line on each.")
