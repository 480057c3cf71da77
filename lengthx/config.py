"""Where the Hydra configs live and how a run's config is composed (``conf/``, one root for ``lengthx``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
