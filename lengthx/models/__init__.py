"""Models: the registry of known models (``conf/model/``), loading, and one adapter per family.

The names below are imported on first use (PEP 562), so ``lengthx.models.minis`` — what every command's config
goes through — loads without torch and transformers.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {"FAMILIES": "families", "Family": "families", "get_family": "families", "LoadedModel": "loading",
          "ModelNotAvailable": "loading", "load_model": "loading", "resolve_device": "loading"}

__all__ = ["FAMILIES", "Family", "LoadedModel", "ModelNotAvailable", "get_family", "load_model", "resolve_device"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"lengthx.models.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'lengthx.models' has no attribute {name!r}")
