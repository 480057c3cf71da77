"""``model=hf``: your own Hugging Face checkpoint, run and named as itself (docs/design.md §4, "Your own model").

``conf/model/hf.yaml`` leaves what a configured model states to the checkpoint: ``model.path=DIR`` (a
``save_pretrained`` directory) or ``model.hub_id=ID`` names it; its family comes from the ``model_type`` of its
``config.json`` (:data:`lengthx.models.model_types.MODEL_TYPES`; any other type is refused); ``model.l_tr`` is
required unless the config states a length lengthx trusts (:data:`lengthx.models.model_types.TRUSTED_LENGTH_KEYS`);
its name is the directory's or the hub repository's (``google/flan-t5-base`` → ``flan-t5-base``), or
``model.name=``. That name is what every result row, table, figure and Algorithm 1's cache carries. A derived name
that is a configured model's (a copy of ``mini-t5``, ``google/flan-t5-large``) becomes ``hf-<name>``, so an own run
never lands in a configured model's rows (in ``profile=mini`` those are its stand-in's); ``model.name=`` set to a
configured model's name is refused. No profile maps ``model=hf`` onto a mini: it runs what it names.

Only ``config.json`` is read here (JSON, no torch): nothing in the directory runs, and ``trust_remote_code`` stays
as the config says (off). The files and weights are checked with the configured models' checks before any work
(:func:`lengthx.models.loading.check_model_dir`).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from omegaconf import open_dict

from lengthx.config import MAX_L_TR, choices
from lengthx.errors import UsageError
from lengthx.models.model_types import (
    FAMILY_PE,
    MODEL_TYPES,
    TRUSTED_LENGTH_KEYS,
    trusted_keys_text,
    trusted_training_length,
)

log = logging.getLogger("lengthx")

OWN_CONFIG = "hf"  # conf/model/hf.yaml: the entry whose checkpoint is the user's (its key ``own: true``)
OWN_PREFIX = "hf-"  # a derived name that is a configured model's gets this prefix
_RENAMED: set[str] = set()  # derived names already announced as hf-<name>
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # a model name as rows, cell keys and file names carry it


def is_own(model_cfg: Any) -> bool:
    """Whether ``model_cfg`` is the ``model=hf`` entry (``own: true``)."""
    return bool(model_cfg is not None and model_cfg.get("own"))


def configured_names() -> set[str]:
    """The names of the configured models (``conf/model/*.yaml`` other than ``hf.yaml``)."""
    return set(choices("model")) - {OWN_CONFIG}


def derived_name(path: str | None, hub_id: str | None) -> str:
    """The name of a checkpoint: its directory's name, or its hub repository's (the part after the owner), in
    the characters of :data:`NAME` (others become ``-``); ``hf-`` before one that is a configured model's."""
    base = Path(str(path).rstrip("/")).resolve().name if path else str(hub_id).rstrip("/").split("/")[-1]
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", base).strip("-._+")
    if not name:
        raise UsageError(f"model=hf: no name can be derived from {_source(path, hub_id)}. Fix: name it, e.g. "
                         "model.name=my-model")
    if name in configured_names():
        if name not in _RENAMED:  # said once per process (a sweep resolves each job)
            _RENAMED.add(name)
            log.info("model=hf: %s is named %s%s (%s is a configured model's name: conf/model/%s.yaml)",
                     _source(path, hub_id), OWN_PREFIX, name, name, name)
        name = OWN_PREFIX + name
    return name


def _source(path: str | None, hub_id: str | None) -> str:
    return f"model.path={path}" if path else f"model.hub_id={hub_id}"


def checkpoint_config(path: str | None, hub_id: str | None) -> tuple[dict[str, Any], Path]:
    """(the parsed ``config.json``, where it lies) of ``model.path``, else of ``model.hub_id`` from the local
    Hugging Face cache, else from the hub when it is reachable. A missing or damaged file is the loader's error,
    naming it and the fix."""
    if path:
        file = Path(str(path)) / "config.json"
        if not file.is_file():
            from lengthx.models.loading import check_checkpoint_dir

            check_checkpoint_dir(str(path), OWN_CONFIG)  # names what is missing (a directory, its config.json)
    else:
        file = _hub_config(str(hub_id))
    try:
        data = json.loads(file.read_bytes().decode("utf-8"))
    except ValueError:
        from lengthx.models.loading import read_json_file

        data = read_json_file(file, OWN_CONFIG)  # raises, naming the file and where it stops parsing
    if not isinstance(data, dict):
        raise UsageError(f"model=hf: {file} is not a JSON object (a checkpoint's config.json). Fix: point "
                         f"{_source(path, hub_id).split('=')[0]}= at a complete checkpoint")
    return data, file


def _hub_config(hub_id: str) -> Path:
    """``config.json`` of hub repository ``hub_id``: from the local cache, else downloaded when the hub answers."""
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(hub_id, "config.json")
    except ValueError as err:  # not a repository id
        raise UsageError(f"model.hub_id={hub_id} is not a Hugging Face repository id ({err}). Fix: an id such as "
                         "google/flan-t5-base, or model.path=DIR for a local checkpoint") from None
    if isinstance(cached, str):
        return Path(cached)
    from lengthx.models.loading import hub_reachable

    if hub_reachable():
        from huggingface_hub import hf_hub_download

        try:
            return Path(hf_hub_download(hub_id, "config.json"))
        except Exception:  # noqa: BLE001 - not on the hub, gated, or the connection broke: said below in one line
            pass
    raise UsageError(f"model=hf model.hub_id={hub_id}: its config.json is neither in the local Hugging Face cache "
                     f"nor reachable on the hub. Fix: download it where the hub is reachable (hf download {hub_id}) "
                     "and copy the cache, or pass model.path=DIR (a save_pretrained directory)")


def resolve_own_model(model_cfg: Any) -> None:
    """Fill the ``model=hf`` entry from its checkpoint, in place: ``family`` from ``config.json``'s
    ``model_type`` (another type is refused, naming the supported ones), ``l_tr`` (given, or the trusted length
    the config states; else refused), ``name`` (given, or :func:`derived_name`), ``display``, ``pe`` and
    ``description``. Any other model config is left as it is; a resolved entry resolves to itself."""
    if not is_own(model_cfg):
        return
    path, hub_id = model_cfg.get("path"), model_cfg.get("hub_id")
    if not path and not hub_id:
        raise UsageError("model=hf runs your own checkpoint: name it with model.path=DIR (a save_pretrained "
                         "directory) or model.hub_id=ID (e.g. google/flan-t5-base)")
    where = _source(path, hub_id)
    config, file = checkpoint_config(path, hub_id)
    model_type = str(config.get("model_type") or "")
    family = MODEL_TYPES.get(model_type)
    if family is None:
        raise UsageError(f"model=hf {where}: {file} is a {model_type or 'model without a model_type'} checkpoint; "
                         f"lengthx runs model types {', '.join(MODEL_TYPES)} (T5 encoders for paper A; GPT-2, "
                         "GPT-NeoX, LLaMA-style and BLOOM decoders). Fix: point it at a checkpoint of one of those")
    given = model_cfg.get("family")
    if given and str(given) != family:
        raise UsageError(f"model.family={given}: {file} is a {model_type} checkpoint, of family {family}. Fix: drop "
                         "model.family (model=hf reads it from the checkpoint)")
    l_tr = model_cfg.get("l_tr")
    if l_tr is None:
        l_tr = trusted_training_length(config)
        if l_tr is not None and l_tr > MAX_L_TR:
            key = TRUSTED_LENGTH_KEYS[model_type]
            raise UsageError(f"model=hf {where}: {file} states {key}={l_tr}, more than lengthx takes as a training "
                             f"length ({MAX_L_TR:,} tokens). Fix: correct {key} in {file}, or model.l_tr=N, the length "
                             "in tokens the model was trained on")
        if l_tr is None:
            raise UsageError(f"model=hf {where}: model.l_tr is required, because {file} states no training length "
                             f"lengthx trusts (it reads only {trusted_keys_text()}; docs/design.md §4). Fix: "
                             "model.l_tr=N, the length in tokens the model was trained on (e.g. model.l_tr=512)")
    name = model_cfg.get("name")
    if name is None:
        name = derived_name(path, hub_id)
    elif not NAME.fullmatch(str(name)):
        raise UsageError(f"model.name={name}: a model name is letters, digits and . _ + - (it names result rows, "
                         "cells and files). Fix: e.g. model.name=my-model")
    elif str(name) in configured_names():
        raise UsageError(f"model.name={name} is a configured model's name (conf/model/{name}.yaml), whose rows are "
                         f"that model's. Fix: model={name} to run it as configured, or another name for yours, e.g. "
                         f"model.name={OWN_PREFIX}{name}")
    with open_dict(model_cfg):
        model_cfg.family = family
        model_cfg.l_tr = int(l_tr)
        model_cfg.name = str(name)
        model_cfg.display = model_cfg.get("display") or str(name)
        model_cfg.pe = model_cfg.get("pe") or FAMILY_PE[family]
        model_cfg.description = f"own checkpoint {path or hub_id} ({model_type})"
