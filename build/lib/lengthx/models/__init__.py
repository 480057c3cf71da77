"""Models: the registry of known models (``conf/model/``), loading, and one adapter per family."""

from lengthx.models.families import FAMILIES, Family, get_family
from lengthx.models.loading import LoadedModel, ModelNotAvailable, load_model, resolve_device

__all__ = ["FAMILIES", "Family", "LoadedModel", "ModelNotAvailable", "get_family", "load_model", "resolve_device"]
