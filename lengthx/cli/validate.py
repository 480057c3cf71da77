"""A run's config, checked before any model loads (docs/results.md, "Validation").

One pydantic schema per ``conf/`` section states what a value must be (τ finite and above 0, counts of at
least 1, settings whole lengths of at most :data:`MAX_SETTING`); :func:`validate_run_config` applies it to a
composed config and then checks the environment the run needs (the task's data — in the paper profile its
real data set, never a generated stand-in —, ``results_dir`` a writable directory whose ``results.csv``
parses, ``model.path`` a complete checkpoint). The first problem is raised as one
:class:`ConfigError` line naming the key and the fix. Sections allow keys the schema does not name: each task
has its own (``conf/task/*.yaml``), and an unknown key is already refused when the config is composed
(:func:`compose_checked` adds "did you mean").
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lengthx.errors import UserError, one_line

MAX_SETTING = 10_000_000  # the longest setting accepted, in task.unit (10M tokens is far past any model here)


class ConfigError(UserError, ValueError):
    """A config value that cannot run; the message names the key and the fix."""


Count = Annotated[int, Field(ge=1)]


Length = Annotated[int, Field(ge=1, le=MAX_SETTING)]


Temperature = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class ModelSection(_Section):
    name: str
    family: str
    l_tr: Count
    path: str | None = None


class MethodSection(_Section):
    name: str
    tau: Temperature | None = None
    search: Literal["grid", "bisect"] | None = None
    per_layer: bool = False


class TaskSection(_Section):
    name: str
    num_examples: Count | None = None
    settings: Annotated[list[Length], Field(min_length=1)] | None = None
    only: list[str | int] | None = None  # setting labels; Hydra reads task.only=[5,25] as numbers
    seed: int = 0
    max_new_tokens: Annotated[int, Field(ge=0)] | None = None


class ProfileSection(_Section):
    name: str
    num_examples: Count | None = None
    calibration_examples: Count | None = None


class CalibrationSection(_Section):
    num_examples: Count
    row_stride: Count = 1


class RunConfig(_Section):
    """``conf/config.yaml`` with its groups, as ``lengthx run`` / ``stats`` / ``calibrate`` compose it."""

    model: ModelSection
    method: MethodSection
    task: TaskSection
    profile: ProfileSection
    calibration: CalibrationSection
    results_dir: str
    batch_size: Count = 1
    batch_tokens: Count | None = None


FIXES = {
    "method.tau": "a finite temperature above 0, e.g. method.tau=0.8",
    "task.num_examples": "a count of at least 1, e.g. task.num_examples=10 (null: the profile's count)",
    "task.settings": (f"a non-empty list of whole lengths in task.unit, each from 1 to {MAX_SETTING:,} "
                      "(lengthx.cli.validate.MAX_SETTING), e.g. task.settings=[1000,2000] (null: the task's own settings)"),
    "task.max_new_tokens": "a number of tokens of at least 0, e.g. task.max_new_tokens=10",
    "model.l_tr": "the model's training length in tokens, e.g. model.l_tr=512",
    "profile.num_examples": "a count of at least 1, e.g. profile.num_examples=10",
    "calibration.num_examples": "a count of at least 1, e.g. calibration.num_examples=2",
    "calibration.row_stride": "1 (every query row) or more, e.g. calibration.row_stride=8",
    "batch_size": "a count of at least 1, e.g. batch_size=4",
    "batch_tokens": "a number of prompt tokens of at least 1, e.g. batch_tokens=8192 (null: no limit)",
    "method.search": "method.search=grid (the paper) or method.search=bisect",
}


def _key(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _first_error(err: ValidationError, prefix: tuple[Any, ...] = ()) -> str:
    first = err.errors()[0]
    key = _key((*prefix, *first["loc"]))
    value = first.get("input")
    shown = "[]" if value == [] else ("null" if value is None else str(value))
    reason = first["msg"][0].lower() + first["msg"][1:]
    fix = FIXES.get(re.sub(r"\[\d+\]", "", key), "see the key's comment in lengthx/conf/")
    return f"{key}={shown}: {reason}. Fix: {fix}"


def validate_run_config(cfg: DictConfig, environment: bool = True, checked: set[str] | None = None) -> None:
    """Raise :class:`ConfigError` (or the store's / loader's error) on the first value or place that cannot run.

    ``environment`` adds the checks of the places the run uses: ``results_dir`` and ``model.path``. Paths in
    ``checked`` are skipped and the ones checked here are added (a sweep checks each place once)."""
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except Exception as err:  # noqa: BLE001 - an interpolation that does not resolve, in one line
        raise ConfigError(f"the config does not resolve: {err}".splitlines()[0]) from None
    try:
        RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_first_error(err)) from None
    if not environment:
        return
    from lengthx.core.store import ResultsStore  # the places a run uses: imported only once the values hold
    from lengthx.models.loading import check_checkpoint_dir

    checked = set() if checked is None else checked
    check_task_data(cfg)
    path = cfg.model.get("path")
    if path and str(path) not in checked:
        check_checkpoint_dir(str(path), str(cfg.model.name))
        checked.add(str(path))
    results_dir = str(cfg.results_dir)
    if results_dir not in checked:
        ResultsStore(Path(results_dir)).check()
        checked.add(results_dir)


def check_task_data(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` when the task cannot read its data: a configured file that is missing, a hub
    data set that is offline and not cached, or — in the paper profile — no real data at all (topics without
    LongEval's conversations, MDQA without Lost in the Middle's files): the message names the file and where
    the public one comes from. Each task states what it needs (``data_problem`` in ``lengthx/tasks/``)."""
    from lengthx.tasks import TASKS, resolve_settings

    check = getattr(TASKS.get(str(cfg.task.name)), "data_problem", None)
    if check is None:
        return
    try:
        settings = resolve_settings(cfg.task, str(cfg.profile.name), int(cfg.model.l_tr))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    problem = check(cfg.task, str(cfg.profile.name), settings)
    if problem:
        raise ConfigError(problem)


def compose_checked(overrides: list[str]) -> DictConfig:
    """The config of ``overrides`` (``lengthx.config.compose``); a key the config does not have is refused
    with the closest existing key ("did you mean")."""
    from hydra.errors import HydraException

    from lengthx.config import compose

    try:
        return compose(overrides)
    except HydraException as err:
        raise composition_error(err, overrides) from None


def composition_error(err: Exception, overrides: list[str]) -> ConfigError:
    """Hydra's error on composing ``overrides`` as one line; for an unknown key, with "did you mean"."""
    from lengthx.config import compose

    text = one_line(str(err))
    match = re.search(r"Could not override '([^']+)'", text)
    if match is None:
        return ConfigError(text)
    key = match.group(1)
    parent, _, leaf = key.rpartition(".")
    try:
        node = compose([o for o in overrides if o.lstrip("+~").split("=", 1)[0] != key and "," not in o])
    except Exception:  # noqa: BLE001 - another override is wrong too: Hydra's own message then
        return ConfigError(text)
    for part in parent.split(".") if parent else []:
        node = node.get(part) if isinstance(node, DictConfig) else None
    names = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
    if leaf in names:  # the key exists: the override failed for another reason
        return ConfigError(text)
    close = difflib.get_close_matches(leaf, names, n=1, cutoff=0.6)
    prefix = f"{parent}." if parent else ""
    hint = f"did you mean {prefix}{close[0]}?" if close else f"the keys there are: {', '.join(sorted(names))}"
    return ConfigError(f"unknown key {key}: {hint} (to add a new key, write +{key}=…)")


def _schema_field(key: str) -> Any:
    """The pydantic field of ``section.key`` (or a top-level key) in :class:`RunConfig`, or None."""
    section, _, leaf = key.rpartition(".")
    model: Any = RunConfig
    if section:
        outer = RunConfig.model_fields.get(section)
        model = outer.annotation if outer is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    field = model.model_fields.get(leaf)
    if field is None or (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
        return None  # a whole section (task=passkey picks a config of its group)
    return field


def _scalar(text: str) -> Any:
    """A plain override value as Hydra reads it (null, a bool, an int, a float, else the text); ``...`` for a
    value Hydra parses by its own grammar (a sweep, list, dict, interpolation, quoted text), left to it."""
    if not text or any(c in text for c in ",[]{}()$'\"*:") or text.startswith(("range", "choice", "glob")):
        return ...
    lowered = text.lower()
    if lowered == "null":
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def check_override_values(overrides: list[str]) -> None:
    """Check each plain ``key=value`` override against the schema (:class:`RunConfig`) before anything is
    composed, so that a wrong value on the command line is answered without Hydra; the composed config is
    validated in full afterwards (:func:`validate_run_config`)."""
    from pydantic import TypeAdapter

    for ov in overrides:
        if ov.startswith(("-", "+", "~")) and not ov.startswith("++"):
            continue
        key, sep, text = ov.removeprefix("++").partition("=")
        value = _scalar(text) if sep else ...
        field = _schema_field(key) if value is not ... else None
        if field is None:
            continue
        try:
            kind = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
            TypeAdapter(kind).validate_python(value)
        except ValidationError as err:
            raise ConfigError(_first_error(err, tuple(key.split(".")))) from None
