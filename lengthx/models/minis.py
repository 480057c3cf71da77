"""``profile=mini``: every paper model stands in for by a small checkpoint shipped in the repo.

A paper model's config (``conf/model/gpt2.yaml``) names its stand-in with ``mini: mini-gpt2``, itself a model
config (``conf/model/mini-gpt2.yaml``) whose ``path`` is a checkpoint under ``lengthx/checkpoints/``. In the
mini profile the paper model keeps its name (so results land in its table rows) but takes the mini's
weights and training length: ``model=gpt2`` runs mini-gpt2 at L_t = 128, and task lengths that scale with
L_tr scale with the mini's. An explicit ``model.path=`` always wins; other profiles are untouched. ``model=hf``
(your own checkpoint, :mod:`lengthx.models.own`) is resolved from its checkpoint here and never mapped.

A mini may hand some tasks to another shipped mini that does them at its training length: ``task_minis: {lines:
mini-t5-lookup}`` in ``conf/model/mini-t5.yaml`` runs ``task=lines`` of ``model=flan-t5-large`` (or of
``model=mini-t5`` itself, at its configured path) on the lookup stand-in (docs/mini-t5-lookup.md); the row keeps
the model's name, and each table's caption names the stand-in that computed the task's cells
(:func:`task_minis`).
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


def task_minis(mini: str) -> dict[str, str]:
    """``task -> mini``: the tasks the shipped mini ``mini`` hands to another shipped mini (its ``task_minis``)."""
    return _handed_on(mini_config(mini))


def _handed_on(mini_cfg: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (mini_cfg.get("task_minis") or {}).items()}


def _stand_in(model: Any, task: str | None) -> tuple[str, Any] | None:
    """The shipped mini that runs ``model`` on ``task`` in the mini profile and its config, or ``None`` where the
    model is not mapped: a paper model runs as its ``mini:`` entry, a shipped mini at its configured path as
    itself, and either as the mini its ``task_minis`` names for ``task``. An explicit ``model.path=`` is never
    mapped."""
    if model.get("path"):
        if not model.get("trained_by") or not (CONF_MODEL_DIR / f"{model.name}.yaml").is_file():
            return None
        mini, own = str(model.name), mini_config(str(model.name))
        if str(model.path) != str(own.path):
            return None
    elif model.get("mini"):
        mini = str(model.mini)
        own = mini_config(mini)
    else:
        return None
    other = _handed_on(own).get(str(task))
    return (mini, own) if other is None else (other, mini_config(other))


def apply_profile(cfg: Any) -> Any:
    """Map ``cfg.model`` onto its shipped mini when the profile is ``mini`` and no ``model.path`` is given.

    Sets ``model.path``, ``model.l_tr``, the stand-in's ``topics_format`` and ``lines_format`` where it has them,
    and ``model.mini`` (the stand-in's name) in place and returns ``cfg``; a task the mini hands to another stand-in
    (``task_minis``) takes that stand-in's instead.
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
    if name != "mini" or model is None:
        return cfg
    task = cfg.get("task")
    found = _stand_in(model, task.get("name") if task is not None else None)
    if found is None or (model.get("path") and found[0] == model.name):
        return cfg
    stand_in, mini = found
    if not Path(str(mini.path)).is_dir():
        raise ValueError(
            f"profile=mini runs model={model.name} as {stand_in}, whose checkpoint {mini.path} is missing; "
            f"train it ({mini.get('trained_by', 'see its model card')}) or pass model.path=DIR"
        )
    with open_dict(model):
        model.path = str(mini.path)
        model.l_tr = int(mini.l_tr)
        model.mini = stand_in
        for key in ("topics_format", "lines_format"):  # the prompt format the stand-in was trained in (task.format)
            if mini.get(key):
                model[key] = str(mini[key])
        if model.family != mini.family:
            raise ValueError(f"model {model.name} (family {model.family}) cannot stand in as {stand_in} "
                             f"(family {mini.family}); fix its `mini:` or `task_minis:` entry in conf/model/")
    return cfg


def compose_run(overrides: list[str]) -> Any:
    """The config of ``lengthx run <overrides>`` with the profile applied, as a run sees it."""
    return apply_profile(compose(overrides))


def compose_train(overrides: list[str]) -> Any:
    """The config of ``lengthx train <overrides>`` with the profile applied, as the training loop sees it."""
    return apply_profile(compose(overrides, config_name=TRAIN_CONFIG))
