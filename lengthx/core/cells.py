"""Cells, the unit of every result (docs/design.md §1, §7): (model, method, task, setting), and the hash
that says whether a stored cell is this one: config, checkpoint and task behaviour.

A hash holds what decides a cell's numbers and nothing about where they were computed: the model enters by
its config without ``path`` (and without the prose that only labels it), its checkpoint by content
(:func:`lengthx.models.loading.model_fingerprint`: every byte of the weights, the tokenizer, the config), and
the task by what its code does at the cell's setting (:func:`task_behaviour`: a few seeded prompts and the
scorer on fixed answers), so a changed prompt or scorer invalidates exactly the cells it changes. A clone of
the repository at any path, or an install, finds the committed cells done.

The number of examples is not part of a cell: examples are the first n of one seeded sequence, so a cell
finished with 10 examples is done for a request of 4, and a request of 10 after 4 computes the other 6.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lengthx.config import portable
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
    from lengthx.alignment.algorithm1 import PAPER_TAU_MIN  # here: listing cells needs no torch

    name = method_cfg.name
    if name == "fixed":
        name = f"fixed-{float(method_cfg.tau):g}"
    if method_cfg.get("scope", "encoder") != "encoder":
        name += f"-scope={method_cfg.scope}"
    if name in ("pmax", "entropy") and method_cfg.get("per_layer", False):
        name += "-per-layer"
    if name.startswith(("pmax", "entropy")) and method_cfg.get("search", "grid") != "grid":
        name += f"-{method_cfg.search}"
    tau_min = method_cfg.get("tau_min")
    if name.startswith(("pmax", "entropy")) and tau_min is not None and float(tau_min) != PAPER_TAU_MIN:
        name += f"-min{float(tau_min):g}"  # beyond the paper's grid floor (docs/mini-t5-study.md)
    return name


# model keys that say where a checkpoint lies or how the model is labelled, not what it computes: the checkpoint
# itself enters a cell's hash by content (model_fingerprint)
MODEL_UNHASHED_KEYS = ("path", "description", "display", "paper_role", "paper_b_role", "trained_by",
                       "params",  # params: descriptive (paper A Table 2, paper B Table 1)
                       "trust_remote_code",  # whether loading may run a directory's code: its weights are hashed
                       "task_minis")  # the tasks a mini hands on: a handed task's checkpoint is hashed as its own
# task keys that pick settings (a cell is one setting), count its examples (a cell grows: the first n of one seeded
# sequence) or describe the task
TASK_UNHASHED_KEYS = ("settings", "only", "description", "num_examples", "paper_num_examples")
# task keys added after cells were computed whose unset value (null) is what those cells ran: a null one stays out
# of the hash, so adding the key leaves every existing cell's hash as it was
TASK_OPTIONAL_KEYS = ("testcases_dir", "num_topics", "num_lines", "format")


def model_identity(model_cfg: Any) -> dict[str, Any]:
    """The model as it enters a cell's hash and Algorithm 1's cache key: its resolved config without
    :data:`MODEL_UNHASHED_KEYS`."""
    container = OmegaConf.to_container(model_cfg, resolve=True) if isinstance(model_cfg, DictConfig) \
        else dict(model_cfg)
    return portable({k: v for k, v in container.items() if k not in MODEL_UNHASHED_KEYS})


def config_hash(cfg: DictConfig, setting: Setting) -> str:
    """Hash of everything in the config that decides a cell's numbers (not the results directory, the device,
    where the checkpoint lies, or where the checkout lies: :func:`portable`)."""
    from lengthx.alignment.algorithm1 import PAPER_TAU_MIN

    relevant = {
        "model": model_identity(cfg.model),
        "method": {k: v for k, v in OmegaConf.to_container(cfg.method, resolve=True).items()
                   if not (k == "tau_min" and v == PAPER_TAU_MIN)},  # the paper's floor: hashes as before the key
        "task": {k: v for k, v in OmegaConf.to_container(cfg.task, resolve=True).items()
                 if k not in TASK_UNHASHED_KEYS and not (k in TASK_OPTIONAL_KEYS and v is None)},
        "setting": [setting.label, setting.value, setting.unit],
        "dtype": cfg.dtype,
        "calibration": OmegaConf.to_container(cfg.calibration, resolve=True)
        if cfg.method.name in ("pmax", "entropy", "prop1", "prop2") else None,
    }
    task = TASKS.get(str(cfg.task.name))
    if relevant["calibration"] is not None and task is not None and task.calibration_item:
        relevant["calibration"]["disjoint_from_evaluation"] = True  # docs/design.md §5 (lengthx.tasks.base)
    return hashlib.sha256(json.dumps(portable(relevant), sort_keys=True, default=str).encode()).hexdigest()[:12]


def cell_hash(cfg: DictConfig, setting: Setting, fingerprint: str | None = None, behaviour: str | None = None) -> str:
    """A cell's identity in results.csv and its records: :func:`config_hash`, the checkpoint it scored and what
    the task does at ``setting``.

    ``fingerprint`` defaults to the content of the checkpoint at ``model.path``
    (:func:`lengthx.models.loading.model_fingerprint`), so a checkpoint retrained or patched at the same path
    starts its cells afresh instead of counting its predecessor's as done, and the same checkpoint at another
    path counts them done. ``behaviour`` defaults to :func:`task_behaviour` with the model's tokenizer."""
    if fingerprint is None:
        from lengthx.models.loading import model_fingerprint

        fingerprint = model_fingerprint(cfg.model.get("path"))
    if behaviour is None:
        from lengthx.models.loading import load_tokenizer
        from lengthx.tasks import build_task

        task = build_task(cfg.task, str(cfg.profile.name), int(cfg.model.l_tr))
        behaviour = task_behaviour(task, setting, load_tokenizer(cfg.model), int(cfg.task.get("seed") or 0))
    return hashlib.sha256(f"{config_hash(cfg, setting)}|{fingerprint}|{behaviour}".encode()).hexdigest()[:12]


# how many seeded examples stand for a task's prompts in its behaviour fingerprint
BEHAVIOUR_EXAMPLES = 2


def fixed_answers(target: Any) -> list[str]:
    """The outputs a task's scorer is tried on (:func:`task_behaviour`): the target as it is, inside a
    sentence, twice, on a second line, and wrong ones."""
    first = target[0] if isinstance(target, list | tuple) and target else target
    text = str(first)
    return [text, f"The answer is {text}.", f"{text} {text}", f"\n{text}", "", "0", "lengthx", f"{text}x"]


def task_behaviour(task: Any, setting: Setting, tokenizer: Any, seed: int) -> str:
    """What a task does at ``setting``, as a hash: the id, prompt, target, lengths and metadata of its first
    :data:`BEHAVIOUR_EXAMPLES` seeded examples, what it names as their data, and its scorer's output on
    :func:`fixed_answers` of each (likelihood tasks score with the model: their prompts and targets stand for
    them). A change to a prompt, the data or a scorer changes the hash of exactly the cells it affects."""
    h = hashlib.sha256(type(task).__name__.encode())
    h.update(f"|data:{task.data_source(setting) or ''}".encode())
    examples = task.examples(setting, tokenizer, BEHAVIOUR_EXAMPLES, seed)
    generation = task.scoring == "generation"
    for e in examples:
        h.update(json.dumps([e.id, e.prompt_hash, e.target, e.requested_tokens, e.actual_tokens, e.meta],
                            sort_keys=True, default=str).encode())
        if generation:
            h.update(json.dumps([task.score(out, e) for out in fixed_answers(e.target)], sort_keys=True).encode())
    return h.hexdigest()[:12]


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
