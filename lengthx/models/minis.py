"""``profile=mini``: every paper model stands in for by a small checkpoint shipped in the repo.

A paper model's config (``conf/model/gpt2.yaml``) names its stand-in with ``mini: mini-gpt2``, itself a model
config (``conf/model/mini-gpt2.yaml``) whose ``path`` is a checkpoint under ``lengthx/checkpoints/``. In the
mini profile the paper model keeps its name (so results land in its table rows) but takes the mini's
weights and training length: ``model=gpt2`` runs mini-gpt2 at L_t = 128, and task lengths that scale with
L_tr scale with the mini's. An explicit ``model.path=`` always wins; other profiles are untouched. ``model=hf``
(your own checkpoint, :mod:`lengthx.models.own`) is resolved from its checkpoint here and never mapped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf, open_dict

from lengthx.config import CONF_DIR, TRAIN_CONFIG, compose, register_resolvers
from lengthx.errors import UsageError
from lengthx.models.own import resolve_own_model

CONF_MODEL_DIR = CONF_DIR / "model"


def mini_config(name: str) -> Any:
    """The resolved ``conf/model/<name>.yaml`` of a shipped mini."""
    path = CONF_MODEL_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"model config names mini '{name}', but {path} does not exist")
    register_resolvers()
    cfg = OmegaConf.load(path)
    OmegaConf.resolve(cfg)
    return cfg


def apply_profile(cfg: Any) -> Any:
    """Map ``cfg.model`` onto its shipped mini when the profile is ``mini`` and no ``model.path`` is given.

    Sets ``model.path``, ``model.l_tr``, the stand-in's ``topics_format`` where it has one, and ``model.mini``
    (the stand-in's name) in place and returns ``cfg``.
    A missing checkpoint is an error naming the script that trains it. ``model=hf`` takes its family, L_tr and
    name from its checkpoint instead (:func:`lengthx.models.own.resolve_own_model`).
    """
    profile = cfg.get("profile")
    name = profile.get("name") if profile is not None else None
    model = cfg.get("model")
    resolve_own_model(model)
    if name == "paper" and model is not None and model.get("trained_by"):
        raise UsageError(f"profile=paper runs the papers' models, and model={model.name} is a shipped mini: name "
                         "one (model=flan-t5-xl, model=gpt2, … see `lengthx ls`), or run the mini with profile=mini")
    if name != "mini" or model is None or model.get("path") or not model.get("mini"):
        return cfg
    mini = mini_config(str(model.mini))
    if not Path(str(mini.path)).is_dir():
        raise ValueError(
            f"profile=mini runs model={model.name} as {model.mini}, whose checkpoint {mini.path} is missing; "
            f"train it ({mini.get('trained_by', 'see its model card')}) or pass model.path=DIR"
        )
    with open_dict(model):
        model.path = str(mini.path)
        model.l_tr = int(mini.l_tr)
        if mini.get("topics_format"):  # the prompt format the stand-in was trained in (task.format follows it)
            model.topics_format = str(mini.topics_format)
        if model.family != mini.family:
            raise ValueError(f"model {model.name} (family {model.family}) cannot stand in as {model.mini} "
                             f"(family {mini.family}); fix its `mini:` entry in conf/model/{model.name}.yaml")
    return cfg


def compose_run(overrides: list[str]) -> Any:
    """The config of ``lengthx run <overrides>`` with the profile applied, as a run sees it."""
    return apply_profile(compose(overrides))


def compose_train(overrides: list[str]) -> Any:
    """The config of ``lengthx train <overrides>`` with the profile applied, as the training loop sees it."""
    return apply_profile(compose(overrides, config_name=TRAIN_CONFIG))
