"""A run's config, checked before any model loads (docs/results.md, "Validation").

One pydantic schema per ``conf/`` section states what a value must be (τ finite and above 0, ``method=fixed``
with a τ, counts of at least 1 and at most :data:`MAX_EXAMPLES`, lengths whole numbers of at most
:data:`MAX_SETTING` — ``model.l_tr`` at most :data:`MAX_L_TR` —, a known dtype, device and scope); then what
applies to the whole run: the settings it resolves to (``task.only`` naming some of them, ``task.unit`` one the
task has, every length within bounds). :func:`validate_run_config` applies all of it to a composed config (every
job of a ``-m`` sweep is checked before the first runs) and then checks the environment the run needs (the
task's data — in the paper profile its real data set, never a generated stand-in —, the device, ``results_dir``
a writable directory whose ``results.csv`` parses, ``model.path`` a checkpoint of the configured family whose
shapes and vocabulary fit its config and that runs no code of its own). The first problem is raised as one
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
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from lengthx.config import MAX_L_TR, check_output_place, examples_per_setting
from lengthx.errors import UserError, one_line

MAX_SETTING = 10_000_000  # the longest setting accepted, in task.unit (10M tokens is far past any model here)
MAX_EXAMPLES = 100_000  # the most examples (or calibration examples) per setting accepted
MAX_BATCH = 4096  # the most examples per batch accepted
MAX_NAME = 100  # the longest model.name accepted: it names the results' files (a file name holds 255 bytes)
MAX_FACTOR = 64  # the largest multiple of L_t accepted (task.factors, task.text_factor, task.attention_factor)
DTYPES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")  # lengthx.models.loading.resolve_dtype
DEVICE = r"auto|cpu|mps|cuda(:\d+)?"


class ConfigError(UserError, ValueError):
    """A config value that cannot run; the message names the key and the fix."""


def _not_bool(value: Any) -> Any:
    """YAML and Hydra read ``true`` as a bool, which pydantic would take for the number 1."""
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a yes/no value, not a number")
    return value


Number = BeforeValidator(_not_bool)
Count = Annotated[int, Number, Field(ge=1, le=MAX_EXAMPLES)]


Length = Annotated[int, Number, Field(ge=1, le=MAX_SETTING)]


TrainingLength = Annotated[int, Number, Field(ge=1, le=MAX_L_TR)]


Factor = Annotated[float, Number, Field(gt=0, le=MAX_FACTOR, allow_inf_nan=False)]


Temperature = Annotated[float, Number, Field(gt=0, allow_inf_nan=False)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class ModelSection(_Section):
    name: Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
    family: str
    l_tr: TrainingLength
    path: str | None = None
    trust_remote_code: bool = False


class MethodSection(_Section):
    name: str
    tau: Temperature | None = None
    scope: Literal["encoder", "all"] | None = None
    search: Literal["grid", "bisect"] | None = None
    per_layer: bool = False
    tau_min: Annotated[float, Number, Field(ge=0.05, lt=1.0, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _fixed_has_tau(self) -> MethodSection:
        if self.name == "fixed" and self.tau is None:
            raise ValueError("method=fixed needs its temperature")
        return self


class TaskSection(_Section):
    name: str
    num_examples: Count | None = None
    paper_num_examples: Count | None = None
    settings: Annotated[list[Length], Field(min_length=1)] | None = None
    only: Annotated[list[str | int], Field(min_length=1)] | None = None  # labels; Hydra reads [5,25] as numbers
    unit: str | None = None
    seed: Annotated[int, Number] = 0
    max_new_tokens: Annotated[int, Number, Field(ge=0, le=MAX_SETTING)] | None = None
    l_t: TrainingLength | None = None
    factors: Annotated[list[Factor], Field(min_length=1)] | None = None
    text_factor: Factor | None = None
    attention_medians: Annotated[int, Number, Field(ge=0, le=MAX_EXAMPLES)] | None = None
    attention_factor: Factor | None = None
    generated_records: Count | None = None


class ProfileSection(_Section):
    name: str
    num_examples: Count | None = None
    calibration_examples: Count | None = None


class CalibrationSection(_Section):
    num_examples: Count
    row_stride: Annotated[int, Number, Field(ge=1, le=MAX_SETTING)] = 1


class RunConfig(_Section):
    """``conf/config.yaml`` with its groups, as ``lengthx run`` / ``stats`` / ``calibrate`` compose it."""

    model: ModelSection
    method: MethodSection
    task: TaskSection
    profile: ProfileSection
    calibration: CalibrationSection
    results_dir: str
    dtype: Literal[DTYPES] = "auto"  # type: ignore[valid-type]
    device: Annotated[str, Field(pattern=f"^({DEVICE})$")] = "auto"
    batch_size: Annotated[int, Number, Field(ge=1, le=MAX_BATCH)] = 1
    batch_tokens: Annotated[int, Number, Field(ge=1, le=MAX_SETTING)] | None = None


COUNT = f"from 1 to {MAX_EXAMPLES:,} (lengthx.cli.validate.MAX_EXAMPLES)"
FIXES = {
    "method.tau": "a finite temperature above 0, e.g. method.tau=0.8",
    "method": "method=fixed method.tau=0.8 (method=fixed applies the τ you give; there is no default)",
    "method.scope": "method.scope=encoder (paper A: T5 encoder self-attention) or method.scope=all",
    "task.num_examples": f"a count {COUNT}, e.g. task.num_examples=10 (null: the profile's count)",
    "task.paper_num_examples": f"a count {COUNT}, e.g. task.paper_num_examples=50",
    "task.settings": (f"a non-empty list of whole lengths in task.unit, each from 1 to {MAX_SETTING:,} "
                      "(lengthx.cli.validate.MAX_SETTING), e.g. task.settings=[1000,2000] (null: the task's own settings)"),
    "task.only": "a non-empty list of the task's setting labels, e.g. task.only=[20k,30k] (null: every setting)",
    "task.seed": "a whole number, e.g. task.seed=0",
    "task.max_new_tokens": f"a number of tokens from 0 to {MAX_SETTING:,}, e.g. task.max_new_tokens=10",
    "task.l_t": f"the training length in tokens, from 1 to {MAX_L_TR:,}, e.g. task.l_t=1024 (null: model.l_tr)",
    "task.factors": f"a non-empty list of multiples of L_t above 0 and at most {MAX_FACTOR}, e.g. task.factors=[1,2,4]",
    "task.text_factor": f"a multiple of L_t above 0 and at most {MAX_FACTOR}, e.g. task.text_factor=5",
    "task.attention_factor": f"a multiple of L_t above 0 and at most {MAX_FACTOR}, e.g. task.attention_factor=4",
    "task.attention_medians": f"a count from 0 to {MAX_EXAMPLES:,}, e.g. task.attention_medians=4",
    "task.generated_records": f"a count {COUNT}, e.g. task.generated_records=500",
    "model.l_tr": f"the model's training length in tokens, from 1 to {MAX_L_TR:,} (lengthx.config.MAX_L_TR), "
                  "e.g. model.l_tr=512",
    "model.trust_remote_code": "true or false",
    "model.name": f"a name of 1 to {MAX_NAME} characters (it names the cells' record files), e.g. model.name=my-t5",
    "profile.num_examples": f"a count {COUNT}, e.g. profile.num_examples=10",
    "profile.calibration_examples": f"a count {COUNT}, e.g. profile.calibration_examples=2",
    "calibration.num_examples": f"a count {COUNT}, e.g. calibration.num_examples=2",
    "calibration.row_stride": "1 (every query row) or more, e.g. calibration.row_stride=8",
    "batch_size": f"a count from 1 to {MAX_BATCH}, e.g. batch_size=4",
    "batch_tokens": "a number of prompt tokens of at least 1, e.g. batch_tokens=8192 (null: no limit)",
    "method.search": "method.search=grid (the paper) or method.search=bisect",
    "method.tau_min": "the grid's floor, from 0.05 to below 1, e.g. method.tau_min=0.2 (the paper: 0.5)",
    "dtype": f"one of {', '.join(DTYPES)}, e.g. dtype=auto (bf16 on GPU, fp32 on CPU)",
    "device": "auto, cpu, mps, cuda or cuda:N, e.g. device=auto",
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
    reason = first["msg"][0].lower() + first["msg"][1:]
    reason = reason.removeprefix("value error, ")
    if key == "method" and isinstance(value, dict):  # a check of the whole section (method=fixed needs method.tau)
        key, value = "method.tau", value.get("tau")
    shown = "[]" if value == [] else ("null" if value is None else str(value).lower() if isinstance(value, bool)
                                      else str(value))
    if len(shown) > 80:  # a value too long to show whole (a pasted paragraph as a name)
        shown = f"{shown[:40]}… ({len(shown)} characters)"
    fix = FIXES.get(re.sub(r"\[\d+\]", "", key), "see the key's comment in lengthx/conf/")
    if key == "method.tau" and value is None:
        fix = FIXES["method"]
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
    check_settings(cfg)
    check_output_place(str(cfg.results_dir), "results_dir", "pass results_dir= a directory of its own, e.g. "
                       "results_dir=results/local/mini")
    if not environment:
        return
    from lengthx.core.store import ResultsStore  # the places a run uses: imported only once the values hold
    from lengthx.models.loading import check_model_dir

    checked = set() if checked is None else checked
    check_task_data(cfg)
    check_record_counts(cfg)
    check_device(str(cfg.device))
    check_stats_backend(cfg)
    path = cfg.model.get("path")
    if path and str(path) not in checked:
        check_model_dir(cfg.model)
        check_attention_backend(cfg)
        checked.add(str(path))
    results_dir = str(cfg.results_dir)
    if results_dir not in checked:
        ResultsStore(Path(results_dir)).check()
        checked.add(results_dir)


def check_settings(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` when the settings the run resolves to cannot run: ``task.unit`` not one of the
    task's units, ``task.only`` naming a label the task does not have, or a length past :data:`MAX_SETTING` (the
    mini profile scales the papers' lengths with ``model.l_tr``)."""
    from lengthx.tasks import TASKS, resolve_settings

    task = TASKS.get(str(cfg.task.name))
    units = task.units if task is not None else None
    unit = cfg.task.get("unit")
    if units and unit is not None and str(unit) not in units:
        raise ConfigError(f"task.unit={unit}: task {cfg.task.name} has no such unit. Fix: one of {', '.join(units)}, "
                          f"e.g. task.unit={units[-1]} (the unit of explicit task.settings)")
    if str(cfg.task.name) == "segmented_ppl":
        from lengthx.tasks.segmented_ppl import resolve_settings as ppl_settings

        settings = ppl_settings(cfg.task, int(cfg.task.get("l_t") or cfg.model.l_tr))
        scale = "task.factors × L_t"
    else:
        try:
            settings = resolve_settings(cfg.task, str(cfg.profile.name), int(cfg.model.l_tr))
        except ValueError as err:
            raise ConfigError(f"{err}. Fix: name some of those labels, e.g. task.only=[…], or drop task.only") \
                from None
        scale = "the mini profile scales the paper's lengths by model.l_tr" if not cfg.task.get("settings") \
            and str(cfg.profile.name) == "mini" else "task.settings"
    for s in settings:
        if not 1 <= s.value <= MAX_SETTING:
            raise ConfigError(f"setting {s.label} is {s.value:,} {s.unit} ({scale}, model.l_tr={cfg.model.l_tr}), "
                              f"outside 1 to {MAX_SETTING:,} (lengthx.cli.validate.MAX_SETTING). Fix: a smaller "
                              "model.l_tr or task.settings")


def check_attention_backend(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` when ``attention.backend=flex`` meets a local T5 whose head dimension
    (``d_kv`` of its ``config.json``) is below FlexAttention's minimum, which would otherwise stop the run at its
    first long input (docs/design.md §9)."""
    attention = cfg.get("attention") or {}
    if str(attention.get("backend", "auto")) != "flex" or not cfg.model.get("path"):
        return
    from lengthx.attention.t5_bias import FLEX_MIN_HEAD_DIM
    from lengthx.models.loading import read_json_file

    config = Path(str(cfg.model.path)) / "config.json"
    data = read_json_file(config, str(cfg.model.name))  # check_model_dir has read it already: a JSON object
    d_kv = data.get("d_kv") if isinstance(data, dict) else None  # a model without d_kv is not a T5

    if isinstance(d_kv, int) and d_kv < FLEX_MIN_HEAD_DIM:
        raise ConfigError(f"attention.backend=flex: {config} gives a head dimension (d_kv) of {d_kv}, below "
                          f"FlexAttention's minimum of {FLEX_MIN_HEAD_DIM}. Fix: attention.backend=sdpa (or auto)")


def check_stats_backend(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` when ``attention.stats_backend`` is unknown, or ``triton`` where it cannot run:
    no triton package, or a device that is not CUDA (docs/gpu.md). ``auto`` falls back by itself, with a warning
    (:mod:`lengthx.attention.stats_backend`); ``blocks`` runs everywhere."""
    value = str((cfg.get("attention") or {}).get("stats_backend", "auto"))
    if value == "auto":
        return
    import importlib.util

    import torch

    from lengthx.attention.t5_bias import STATS_BACKENDS

    if value not in STATS_BACKENDS:
        raise ConfigError(f"attention.stats_backend={value} is not one of {', '.join(STATS_BACKENDS)}. Fix: "
                          "attention.stats_backend=auto")
    if value != "triton":
        return
    device = str(cfg.device)
    if importlib.util.find_spec("triton") is None:
        raise ConfigError("attention.stats_backend=triton: the triton package is not installed. Fix: pip install "
                          "'lengthx[gpu]' on a CUDA machine, or attention.stats_backend=auto")
    if not (device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())):
        raise ConfigError(f"attention.stats_backend=triton runs on CUDA only, device={device} is not. Fix: "
                          "device=cuda, or attention.stats_backend=auto")


def check_device(device: str) -> None:
    """Raise :class:`ConfigError` when ``device`` is not on this machine (``device=cuda`` without a GPU)."""
    import torch

    kind = device.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={device}: no CUDA device is visible on this machine. Fix: device=cpu, or "
                          "device=auto (cuda > mps > cpu)")
    if kind == "cuda" and ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
        raise ConfigError(f"device={device}: this machine has {torch.cuda.device_count()} CUDA device(s). Fix: "
                          "device=cuda:0, or device=auto")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise ConfigError(f"device={device}: no Apple GPU (mps) is available. Fix: device=cpu or device=auto")


def check_task_data(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` when the task cannot read its data: a configured file that is missing, a hub
    data set that is offline and not cached, or — in the paper profile — no real data at all (topics without
    LongEval's conversations, MDQA without Lost in the Middle's files): the message names the file and where
    the public one comes from. Each task states what it needs (``data_problem`` in ``lengthx/tasks/``)."""
    from lengthx.tasks import TASKS, Task, resolve_settings

    cls = TASKS.get(str(cfg.task.name))
    if cls is None or cls.data_problem is Task.data_problem:  # a task that reads no configured data
        return
    try:
        settings = resolve_settings(cfg.task, str(cfg.profile.name), int(cfg.model.l_tr))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    problem = cls.data_problem(cfg.task, str(cfg.profile.name), settings)
    if problem:
        raise ConfigError(problem)


def check_record_counts(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` when the run's ``task.num_topics`` conversations or ``task.num_lines`` lines
    cannot fit a setting's tokens with the model's tokenizer (the task's ``count_problem_at``, on the records of the
    run's seed and examples), before any model loads."""
    from lengthx.tasks.base import COUNT_KEYS

    key = COUNT_KEYS.get(str(cfg.task.name))
    if key is None or cfg.task.get(key) is None:
        return
    from lengthx.models.loading import load_tokenizer
    from lengthx.tasks import build_task, resolve_settings

    task = build_task(cfg.task, str(cfg.profile.name))
    tokenizer = load_tokenizer(cfg.model)
    n = examples_per_setting(cfg)  # as the runner counts them
    for s in resolve_settings(cfg.task, str(cfg.profile.name), int(cfg.model.l_tr)):
        problem = task.count_problem_at(tokenizer, s.value, None if n is None else (int(cfg.task.seed), n))
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
