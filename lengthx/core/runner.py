"""Paper A's cells: (model, method, task, setting) → per-example records → tidy CSV rows (docs/design.md §1, §7).

:class:`Runner` gives each cell its τ (none, fixed, log, Algorithm 1 through a cache, Propositions 1-2), its
examples (truncated for the ``truncation`` baseline, wrapped in a chat template where a model has one) and
scores them; the sweep itself is :func:`lengthx.core.sweep.sweep`. An interrupted cell continues from its
records (docs/results.md).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from tqdm.auto import tqdm

from lengthx.alignment.algorithm1 import (
    PAPER_TAU_MIN,
    CalibrationOptions,
    calibrate,
    calibrate_per_layer,
    options_from_config,
)
from lengthx.alignment.propositions import RULE_METHODS, closed_form_temperature, rule_temperature
from lengthx.attention.scaling import ROW_RULES, RowScale
from lengthx.config import examples_per_setting
from lengthx.core.cells import RUNNABLE_METHODS, Cell, cell_hash, method_id, model_identity, task_behaviour
from lengthx.core.length_limits import check_lengths
from lengthx.core.store import (
    SHORT_OF_TARGET,
    ResultsStore,
    StoreError,
    check_own_name,
    read_json,
    remember,
)
from lengthx.core.sweep import row_fields, sweep
from lengthx.core.tau import (
    alignment_info,
    applied_temperature,
    calibration_file,
    keep_calibration,
    read_calibration,
    short_of_target,
)
from lengthx.models.families import get_family
from lengthx.models.generation import chat_prompt, check_generates, encode, generate
from lengthx.models.loading import LoadedModel, load_model, load_tokenizer, model_fingerprint
from lengthx.tasks import Example, Setting, build_task, resolve_settings
from lengthx.tasks.base import CALIBRATION_RESERVE, truncated_example

log = logging.getLogger("lengthx")

# calibration keys that entered the cache key after caches were written with these values (conf/run.yaml): a key
# at this value stays out of it, so those caches keep their names, and any other value gets caches of its own
LATER_KEYS = {"seed_offset": 100003, "reference_seed_offset": 200003}


class Runner:
    """Runs every setting of one (model, method, task) configuration into a results store."""

    def __init__(self, cfg: DictConfig, loaded: LoadedModel | None = None):
        self.cfg = cfg
        self.store = ResultsStore(Path(cfg.results_dir))
        self.task = build_task(cfg.task, cfg.profile.name, int(cfg.model.l_tr))
        self.method = cfg.method
        if self.method.name not in RUNNABLE_METHODS:
            raise ValueError(f"method {self.method.name!r} is not runnable by lengthx run; runnable: "
                             f"{', '.join(RUNNABLE_METHODS)}")
        if self.method.name in ROW_RULES and get_family(str(cfg.model.family)).encoder_decoder:
            raise ValueError(f"method={self.method.name} scales each query row by the keys it sees (causal "
                             "decoders: Qwen's logn, SSMax); in T5's encoder every row sees all L_ex keys and "
                             "both reduce to the log rule: use method=log")
        self._loaded = loaded
        check_own_name(cfg.model, self.store.root)  # two own models under one name would share cells
        self.weights = self.store.fingerprinted(  # part of every cell's and τ cache's key
            lambda: model_fingerprint(cfg.model.get("path")))
        self._tokenizer: Any = None
        self._behaviour: dict[tuple[str, int, str], str] = {}
        self._evaluation: tuple[tuple[str, int, str], list[Example]] | None = None  # the last setting's examples

    @property
    def loaded(self) -> LoadedModel:
        if self._loaded is None:
            self._loaded = load_model(self.cfg.model, device=self.cfg.device, dtype=self.cfg.dtype,
                                      attention=self.cfg.get("attention"))
            if self.task.scoring == "generation":  # before any search or cell
                check_generates(self._loaded, f"model={self.cfg.model.name} ({self.cfg.model.get('path') or 'hub'})")
        return self._loaded

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer: the loaded model's, or loaded alone (examples need no weights)."""
        if self._loaded is not None:
            return self._loaded.tokenizer
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.cfg.model)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer: Any) -> None:
        """Use ``tokenizer`` (the model's own, loaded elsewhere) until the model is loaded."""
        self._tokenizer = tokenizer

    def behaviour(self, setting: Setting) -> str:
        """The task's behaviour at ``setting`` (:func:`lengthx.core.cells.task_behaviour`), once per setting."""
        key = (setting.label, setting.value, setting.unit)
        if key not in self._behaviour:
            try:
                self._behaviour[key] = task_behaviour(self.task, setting, self.tokenizer, int(self.cfg.task.seed))
            except (ValueError, OSError) as err:  # the setting cannot be built: its cell fails alone, as an error row
                self._behaviour[key] = f"cannot build: {type(err).__name__}: {err}"
        return self._behaviour[key]

    def cell_hash(self, setting: Setting) -> str:
        """The hash of this run's cell at ``setting`` (:func:`lengthx.core.cells.cell_hash`)."""
        return cell_hash(self.cfg, setting, self.weights, self.behaviour(setting))

    def settings(self) -> list[Setting]:
        return resolve_settings(self.cfg.task, self.cfg.profile.name, int(self.cfg.model.l_tr))

    @property
    def cell_metrics(self) -> list[str]:
        """The metrics of a finished cell's rows: the task's, and τ."""
        return [*self.task.metrics, "tau"]

    def num_examples(self) -> int:
        """Examples per setting: ``task.num_examples``, else the profile's count, else the paper's."""
        n = examples_per_setting(self.cfg)
        if n is None:
            raise ValueError("no example count: set task.num_examples=N")
        return n

    def kept_examples(self) -> tuple[int, int]:
        """(examples whose records are on disk, examples of all settings) of this run, for an interrupted one."""
        n, settings = self.num_examples(), self.settings()
        kept = 0
        for setting in settings:
            key = Cell(self.cfg.model.name, method_id(self.method), self.task.name, setting).key
            chash = self.cell_hash(setting)
            kept += min(n, sum(r.get("config_hash") == chash for r in self.store.load_records(key).values()))
        return kept, n * len(settings)

    def run(self) -> list[dict[str, Any]]:
        """Run all settings (:func:`lengthx.core.sweep.sweep`) once their lengths are known to fit the model
        (:func:`lengthx.core.length_limits.check_lengths`); returns a summary per cell. The cells' hashes are kept
        for the next run of the same inputs (:mod:`lengthx.core.store.done_memo`), and rows written are read back once,
        so that run finds ``results.csv`` parsed (:mod:`lengthx.core.store.sidecar`)."""
        check_lengths(self)
        cells = self.cells()
        remember(self.cfg, [(c.key, h) for c, h in cells], self.cell_metrics, self.num_examples(),
                 [self.data_source(c.setting) for c, _ in cells])  # the next run of these inputs: done_memo
        summary = sweep(self.store, self)
        if any(s["status"] != "done" for s in summary):
            with contextlib.suppress(StoreError):  # the rows just written, parsed once for the next reader
                self.store.read()
        return summary

    # ---- the sweep's view of this run (lengthx.core.sweep.CellJob) -----------------------------------------
    @property
    def first_metric(self) -> str:
        return self.task.metrics[0]

    def cells(self) -> list[tuple[Cell, str]]:
        return [(Cell(self.cfg.model.name, method_id(self.method), self.task.name, setting), self.cell_hash(setting))
                for setting in self.settings()]

    def is_done(self, cell: Cell, chash: str) -> bool:
        """Finished under this hash with at least this run's number of examples."""
        return self.store.is_done(cell.key, chash, self.cell_metrics, self.num_examples())

    def compute(self, cell: Cell, chash: str, start: float) -> list[dict[str, Any]]:
        return self.run_cell(cell, chash)

    def row_fields(self, cell: Cell, chash: str, start: float) -> dict[str, Any]:
        return row_fields(cell, chash, start, paper=self.cfg.task.paper,
                          table=self.cfg.get("table") or self.cfg.task.table, l_tr=self.cfg.model.l_tr,
                          seed=self.cfg.task.seed,
                          device=str(self._loaded.device) if self._loaded else str(self.cfg.device),
                          data=self.data_source(cell.setting))

    def data_source(self, setting: Setting) -> str:
        """What the setting's examples are built from (the ``data`` column), ``""`` when it cannot be told
        (a status row of a cell whose data could not be read)."""
        try:
            return str(self.task.data_source(setting) or "")
        except (OSError, ValueError):
            return ""

    # ---- one cell ---------------------------------------------------------------------------------------
    def examples(self, setting: Setting, seed_offset: int = 0, n: int | None = None) -> list[Example]:
        if n is None:
            n = self.num_examples()
        return self.task.examples(setting, self.tokenizer, int(n), int(self.cfg.task.seed) + seed_offset)

    def evaluation_examples(self, setting: Setting) -> list[Example]:
        """The setting's evaluation examples (the last setting's are kept: calibration reads them too). A task
        that draws from a finite pool leaves :data:`CALIBRATION_RESERVE` items for calibration when the
        evaluation asks for all of them."""
        key = (setting.label, setting.value, setting.unit)
        if self._evaluation is None or self._evaluation[0] != key:
            extra = {"reserve": CALIBRATION_RESERVE} if self.task.calibration_item else {}
            examples = self.task.examples(setting, self.tokenizer, self.num_examples(),
                                          int(self.cfg.task.seed), **extra)
            self._evaluation = (key, examples)
        return self._evaluation[1]

    def calibration_examples(self, setting: Setting, n: int) -> list[Example]:
        """``n`` length-L_ex examples for Algorithm 1 that are not evaluation examples (docs/design.md §5): seeded
        by ``calibration.seed_offset``; a task with a finite pool draws them from the items the evaluation does
        not use (``task.calibration_item``). Any overlap left (an identical prompt) is an error."""
        seed = int(self.cfg.task.seed) + int(self.cfg.calibration.seed_offset)
        evaluation = self.evaluation_examples(setting)
        item = self.task.calibration_item
        if item:
            used = {e.meta[item] for e in evaluation}
            examples = self.task.examples(setting, self.tokenizer, n, seed, exclude=used)
            if len(examples) < n:
                raise ValueError(
                    f"{self.task.name} {setting.label}: Algorithm 1 needs {n} calibration examples that are not "
                    f"evaluation examples, but only {len(examples)} of the data's items are left outside the "
                    f"{len(evaluation)} evaluated. Fix: lower calibration.num_examples or task.num_examples")
        else:
            examples = self.task.examples(setting, self.tokenizer, n, seed)
        shared = {e.prompt_hash for e in examples} & {e.prompt_hash for e in evaluation}
        if shared:
            raise ValueError(f"{self.task.name} {setting.label}: {len(shared)} calibration example(s) are also "
                             "evaluation examples; change calibration.seed_offset")
        return examples

    def temperature(self, cell: Cell, examples: list[Example]) -> float | list[float] | RowScale:
        """τ of the method for this setting (1 for ``none``); Algorithm 1 goes through the cache.

        Per-layer alignment returns one τ per attention module; logn and SSMax one rule for every query row."""
        name, l_tr = self.method.name, self.loaded.l_tr
        l_ex = sum(e.actual_tokens for e in examples) / len(examples)
        if name == "truncation":
            return 1.0
        if name in RULE_METHODS:  # task.log_l_ex: the measured mean length, or the setting's value (a bucket's lower bound)
            if self.cfg.task.get("log_l_ex", "actual") == "setting":
                l_ex = cell.setting.value
            return rule_temperature(self.method, l_ex, l_tr)
        return self.aligned_temperature(cell)

    def aligned_temperature(self, cell: Cell) -> float | list[float]:
        """Algorithm 1 for ``pmax``/``entropy``, cached per (model, task, setting, mode, search, per_layer)."""
        return self.aligned_temperature_with_source(cell)[0]

    def calibration_path(self, cell: Cell) -> tuple[Path, dict[str, Any]]:
        """Cache file of Algorithm 1 for this cell, and the key it is stored under (:meth:`calibration_key`)."""
        key = self.calibration_key(cell)
        return calibration_file(Path(self.cfg.results_dir), cell, self.method, key), key

    def calibration_key(self, cell: Cell, behaviour: bool = True) -> dict[str, Any]:
        """What Algorithm 1's τ for this cell depends on: like a cell's hash, the model by its config and
        checkpoint content, never by where it lies, and (``behaviour``) the task by its behaviour at the setting
        (:mod:`lengthx.core.cells`: calibration examples are the task's prompts)."""
        m = self.method
        key = {"model": model_identity(self.cfg.model), "task": cell.task,
               "setting": [cell.setting.label, cell.setting.value, cell.setting.unit], "mode": m.name,
               "search": m.get("search"), "scope": m.scope, "per_layer": bool(m.get("per_layer", False)),
               "n": int(self.cfg.calibration.num_examples), "seed": int(self.cfg.task.seed),
               "row_stride": int(self.cfg.calibration.get("row_stride", 1)),
               "weights": self.weights}
        if behaviour:
            key["task_behaviour"] = self.behaviour(cell.setting)
        if self.task.calibration_item:  # its calibration items depend on the evaluation's
            key["disjoint_from_evaluation"] = {"n": self.num_examples(), "reserve": CALIBRATION_RESERVE}
        if self.cfg.task.get("prompt_version") is not None:  # an older prompt's τ is recomputed
            key["prompt_version"] = self.cfg.task.prompt_version
        if self.tau_min() != PAPER_TAU_MIN:  # an extended grid (the paper's keys stay as they were)
            key["tau_min"] = self.tau_min()
        for name, before in LATER_KEYS.items():  # the examples calibrated on (reference and L_ex) come from these
            value = int(self.cfg.calibration.get(name, before))
            if value != before:
                key[name] = value
        return key

    def tau_min(self) -> float:
        """The floor of Algorithm 1's grid: ``method.tau_min``, the paper's 0.5 by default."""
        return float(self.method.get("tau_min") or PAPER_TAU_MIN)

    def calibration_options(self) -> CalibrationOptions:
        """Algorithm 1's mode, scope, search and grid floor (config ``method``) and row stride (``calibration``)."""
        return options_from_config(self.method, self.cfg.calibration)

    def alignment_note(self, cell: Cell) -> str:
        """:data:`SHORT_OF_TARGET` when the cell's Algorithm 1 τ (from its cache entry) is a grid end short of its
        target, else ``""``."""
        if self.method.name not in ("pmax", "entropy"):
            return ""
        cached = read_json(self.calibration_path(cell)[0], required=("tau",)) or {}
        return SHORT_OF_TARGET if short_of_target(cached, str(self.method.name), self.tau_min()) else ""

    def aligned_temperature_with_source(self, cell: Cell) -> tuple[float | list[float], Path, bool]:
        """(τ, cache file, whether it came from the cache) of Algorithm 1 (or Propositions 1-2) for this cell."""
        m = self.method
        path, key = self.calibration_path(cell)
        kind = "closed_form" if m.name in ("prop1", "prop2") else "aligned"
        cached = read_calibration(path, key, kind)
        if cached is not None:
            return cached["tau"], path, True
        n, cal = int(self.cfg.calibration.num_examples), self.cfg.calibration
        ref_setting = Setting("L_tr", self.loaded.l_tr, "tokens")
        reference = [encode(self.loaded, [e.prompt])
                     for e in self.chat_examples(self.examples(ref_setting, cal.reference_seed_offset, n))]
        extra_ex = self.chat_examples(self.calibration_examples(cell.setting, n))
        extra = [encode(self.loaded, [e.prompt]) for e in extra_ex]
        if m.name in ("prop1", "prop2"):
            l_ex = sum(e.actual_tokens for e in extra_ex) / len(extra_ex)
            tau, info = closed_form_temperature(self.loaded, reference, extra, m.name, l_ex, m.scope)
            info["forward_passes"] = 2 * n
        elif m.get("per_layer", False):
            layers = calibrate_per_layer(self.loaded, reference, extra, self.calibration_options())
            tau: float | list[float] = [r.tau for r in layers]
            per = [alignment_info(r) for r in layers]  # one cache entry holds every layer's, as lists
            info = {"target": [x["target"] for x in per], "evaluated": [x["evaluated"] for x in per],
                    "forward_passes": sum(x["forward_passes"] for x in per)}
        else:
            result = calibrate(self.loaded, reference, extra, self.calibration_options())
            tau, info = result.tau, alignment_info(result)
        info["L_ex"] = sum(e.actual_tokens for e in extra_ex) / len(extra_ex)
        keep_calibration(path, key, tau, info, cell.key, str(m.name), kind)
        return tau, path, False

    def cell_examples(self, setting: Setting) -> list[Example]:
        """The evaluation examples of a cell; ``truncation`` keeps the last L_tr tokens of each prompt, and
        a model with a ``chat_template`` sees each prompt wrapped in it."""
        examples = self.evaluation_examples(setting)
        if self.method.name == "truncation":
            examples = [truncated_example(e, self.tokenizer, int(self.cfg.model.l_tr)) for e in examples]
        return self.chat_examples(examples)

    def chat_examples(self, examples: list[Example]) -> list[Example]:
        """``examples`` with prompts in ``model.chat_template`` (generation only; likelihood scoring reads the
        raw text). The fitted length ``requested_tokens`` stays the task's; ``actual_tokens`` counts the
        wrapped prompt, the one the model reads."""
        template = self.cfg.model.get("chat_template")
        if not template or self.task.scoring == "likelihood":
            return examples
        from lengthx.data.fitting import count_tokens

        out = []
        for e in examples:
            prompt = chat_prompt(str(template), e.prompt, self.cfg.model.name)
            out.append(Example(e.id, prompt, e.target, e.requested_tokens, count_tokens(self.tokenizer, prompt),
                               {**e.meta, "chat_template": str(template), "task_prompt_tokens": e.actual_tokens}))
        return out

    def batches(self, examples: list[Example]) -> list[list[Example]]:
        """Consecutive runs of at most ``batch_size`` examples and ``batch_tokens`` prompt tokens (always at least
        one example): a long setting is generated, and each record written, one example at a time, so an
        interrupt loses at most the examples in flight."""
        bs = max(1, int(self.cfg.batch_size))
        budget = self.cfg.get("batch_tokens")
        out: list[list[Example]] = []
        for ex in examples:
            last = out[-1] if out else None
            if last is not None and len(last) < bs and (budget is None or sum(
                    e.actual_tokens for e in last) + ex.actual_tokens <= int(budget)):
                last.append(ex)
            else:
                out.append([ex])
        return out

    def run_cell(self, cell: Cell, chash: str) -> list[dict[str, Any]]:
        start = time.time()
        examples = self.cell_examples(cell.setting)
        tau = self.temperature(cell, examples)
        done = self.store.load_records(cell.key, repair=True)
        tau_text = ";".join(f"{t:g}" for t in tau) if isinstance(tau, list) else tau
        tau_record = tau  # as records hold it (JSON): a per-row rule by its label, the τ metric that of the last row
        if isinstance(tau, RowScale):
            tau_text = tau_record = tau.label
        scores: list[dict[str, float]] = []
        metric0 = self.task.metrics[0]
        likelihood = self.task.scoring == "likelihood"
        bs = max(1, int(self.cfg.batch_size))
        bar = tqdm(total=len(examples), desc=cell.key, unit="ex", leave=False)
        with applied_temperature(self.loaded, tau, str(self.method.scope)), bar:  # bar closed on an interrupt too
            todo = []
            index = {ex.id: i for i, ex in enumerate(examples)}  # each example's place in the seeded sequence
            for ex in examples:
                rec = done.get(ex.id)
                if (rec is not None and rec.get("prompt_hash") == ex.prompt_hash and rec.get("tau") == tau_record
                        and rec.get("config_hash") == chash  # same prompt, τ and cell configuration
                        and set(self.task.metrics) <= set(rec["scores"])):
                    scores.append(rec["scores"])
                    bar.update(1)
                else:
                    todo.append(ex)
            for chunk in self.batches(todo):
                if likelihood:  # LM perplexity (paper A Table 3): score the continuation, generate nothing
                    outputs = [""] * len(chunk)
                    chunk_scores = self.task.evaluate(self.loaded, chunk, batch_size=bs)
                else:
                    outputs = generate(self.loaded, [e.prompt for e in chunk], self.task.max_new_tokens,
                                       first_line=self.task.scores_first_line,
                                       start_with_text=self.task.start_with_text)
                    chunk_scores = [self.task.score(o, e) for o, e in zip(outputs, chunk, strict=True)]
                for ex, output, sc in zip(chunk, outputs, chunk_scores, strict=True):
                    check_scores(cell, ex, sc, self.task.metrics)
                    self.store.append_record(cell.key, {
                        "id": ex.id, "index": index[ex.id], "prompt_hash": ex.prompt_hash, "config_hash": chash,
                        "target": ex.target, "output": output, "scores": sc, "tau": tau_record,
                        "requested_tokens": ex.requested_tokens, "actual_tokens": ex.actual_tokens, "meta": ex.meta})
                    scores.append(sc)
                bar.update(len(chunk))
                bar.set_postfix({metric0: f"{sum(s[metric0] for s in scores) / len(scores):.1f}"})
        req = [e.requested_tokens for e in examples if e.requested_tokens is not None]
        base = self.row_fields(cell, chash, start)
        base.update(tau=tau_text, n=len(scores), L_req=round(sum(req) / len(req)) if req else "",
                    L_ex=round(sum(e.actual_tokens for e in examples) / len(examples), 1), status="ok",
                    message=self.alignment_note(cell))
        rows = [{**base, "metric": m, "value": round(sum(s[m] for s in scores) / len(scores), 4)}
                for m in self.task.metrics]
        # τ as a metric too, so the temperature tables (paper A Tables 8-11) render from the same CSV
        mean_tau = sum(tau) / len(tau) if isinstance(tau, list) else tau
        if isinstance(tau, RowScale):
            mean_tau = tau.tau(round(base["L_ex"]))
        return rows + [{**base, "metric": "tau", "value": round(mean_tau, 4)}]


def check_scores(cell: Cell, example: Example, scores: dict[str, Any], metrics: tuple[str, ...] | list[str]) -> None:
    """Raise ValueError (the cell becomes an ``error`` row) when an example's scores lack a metric or hold a value
    that is not a finite number: such a score is never recorded, nor averaged into an ``ok`` row."""
    for m in metrics:
        v = scores.get(m)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{cell.key}: example {example.id} scored {m}={v!r}, not a finite number; nothing of "
                             "this cell is recorded as ok")
