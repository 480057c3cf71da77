"""Paper B's perplexity cells (Tables 2-5, Figures 2-3): ``lengthx run task=segmented_ppl``.

:class:`PerplexityJob` scores one model (the published checkpoint is ``pretrained``; a ``lengthx train``
checkpoint carries its training label, ``@βL_t`` when trained to L_e = βL_t > L_t, or ``task.method_label``)
at every length of the task through the one sweep loop, resuming from per-sequence records; an APE model is
interpolated to each length first (:class:`lengthx.segmented.lengths.LengthState`).

``task.run`` names a training run (``chunk-0.25-2x``); :func:`training_chain` is what it needs, in order: the
OOTB run (one epoch of domain adaptation from the published checkpoint, paper B §4.3) and then the run itself,
which starts from OOTB. Missing runs are trained first (``task.train_missing``).

``method=`` adds a τ method (:data:`TAU_METHODS`) to every self-attention of the scored decoder, at each
evaluation length L with L_tr = L_t (an extension beyond both papers, docs/design.md §5): the closed-form rules
(log, YaRN, LongRoPE, logn, SSMax; :func:`lengthx.alignment.propositions.rule_temperature`) or Algorithm 1
(pmax, entropy) calibrated on training-split sequences. Its id follows the checkpoint's label in the cell
(:func:`cell_method`: ``ootb+yarn``); ``method=none`` cells keep the label alone, and with it their keys and
hashes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf, open_dict
from tqdm.auto import tqdm

from lengthx.alignment.algorithm1 import align_to, options_from_config, reference_statistic
from lengthx.alignment.propositions import RULE_METHODS, rule_temperature
from lengthx.attention.scaling import RowScale
from lengthx.config import CONF_DIR, choices
from lengthx.core.cells import BEHAVIOUR_EXAMPLES, Cell, cell_hash, method_id
from lengthx.core.store import ResultsStore, read_json, write_json
from lengthx.core.sweep import row_fields, sweep
from lengthx.core.tau import (
    alignment_info,
    applied_temperature,
    calibration_file,
    keep_calibration,
    read_calibration,
)
from lengthx.data.corpora import corpus_label
from lengthx.models.loading import load_model, load_tokenizer
from lengthx.segmented import plan as segmented_plan
from lengthx.segmented.lengths import LengthState, attention_histogram
from lengthx.segmented.models import check_family
from lengthx.tasks import build_task
from lengthx.tasks.base import Setting
from lengthx.tasks.segmented_ppl import (
    METRICS,
    TASK_NAME,
    SegmentedPPLTask,
    _token_hash,
    factor_label,
    perplexities,
    resolve_settings,
    sequence_nll,
)

log = logging.getLogger("lengthx")


# τ methods task=segmented_ppl applies; Propositions 1-2 are left out: they assume every query row sees all L_ex
# keys (an encoder), which the rows of a causal decoder do not
TAU_METHODS = (*RULE_METHODS, "pmax", "entropy")


def cell_method(label: str, method_cfg: Any) -> str:
    """A cell's method id: the checkpoint's label (``ootb``, ``chunk-0.25@4L_t``), then ``+<τ method>``
    (``ootb+yarn``, :func:`lengthx.core.cells.method_id`); ``method=none`` keeps the label alone."""
    return label if method_cfg.name == "none" else f"{label}+{method_id(method_cfg)}"


@dataclass(frozen=True)
class TrainStep:
    """One ``lengthx train`` run a perplexity job depends on."""

    run: str  # its directory name under runs/<profile>/<model>/, e.g. chunk-0.25-2x
    overrides: tuple[str, ...]  # the ``lengthx train`` arguments that make it
    start: str  # ootb or pretrained

    @property
    def command(self) -> str:
        return "lengthx train " + " ".join(self.overrides)


def parse_run(run: str) -> tuple[str, float]:
    """``chunk-0.25-2x`` → (``chunk-0.25``, 2.0): a run directory's training label and β = L_e/L_t."""
    label, _, factor = str(run).rpartition("-")
    try:
        beta = float(factor.removesuffix("x"))
    except ValueError:
        beta = 0.0
    if not label or not factor.endswith("x") or beta < 1:
        raise ValueError(f"task.run={run!r} is not a run name <method>-<β>x (ootb-1x, chunk-0.25-2x, da-1x)")
    return label, beta


def run_method_label(run: str) -> str:
    """The method id a run's cells carry: its label, with ``@βL_t`` when trained beyond L_t."""
    if run == segmented_plan.PRETRAINED:
        return run
    label, beta = parse_run(run)
    return label if beta <= 1 else f"{label}@{factor_label(beta)}"


def training_chain(cfg: Any) -> list[TrainStep]:
    """The training runs ``task.run`` needs, in order (paper B §4.3: OOTB first, then the method from it)."""
    run = cfg.task.get("run")
    if not run or run == segmented_plan.PRETRAINED:
        return []
    label, beta = parse_run(str(run))
    methods = choices("method", "train")
    if label not in methods:
        raise ValueError(f"task.run={run}: {label!r} is no training method; valid: {', '.join(methods)}")
    start = str(OmegaConf.load(CONF_DIR / "method" / f"{label}.yaml").get("start") or segmented_plan.PRETRAINED)
    base = (f"model={cfg.model.name}", f"profile={cfg.profile.name}", f"data={cfg.data.name}")
    chain = [TrainStep(str(run), (*base, f"method={label}", f"l_e_factor={beta:g}"), start)]
    if start == segmented_plan.OOTB:
        chain.insert(0, TrainStep(f"{segmented_plan.OOTB}-1x", (*base, "method=ootb"), segmented_plan.PRETRAINED))
    return chain


def train_config(step: TrainStep, data: Any) -> Any:
    """The ``lengthx train`` config of ``step``, on the evaluation's own ``data`` config (the same corpus)."""
    from lengthx.models.minis import compose_train

    cfg = compose_train(list(step.overrides))
    with open_dict(cfg):
        cfg.data = OmegaConf.create(OmegaConf.to_container(data, resolve=True))
    return cfg


def run_path(cfg: Any, run: str) -> Path:
    """``runs/<profile>/<model>/<run>``: where ``lengthx train`` puts the run by default."""
    return segmented_plan.RUNS_DIR / str(cfg.profile.name) / segmented_plan.run_owner(cfg.model) / run


def is_trained(cfg: Any, step: TrainStep) -> bool:
    """Whether ``step``'s run has its final export (a run trained by hand into that directory counts too: the
    cells it scores are keyed by its weights and carry its own training label)."""
    return (run_path(cfg, step.run) / "final" / segmented_plan.META_FILE).is_file()


def train_chain(cfg: Any) -> None:
    """Train every missing run of :func:`training_chain`, or (``task.train_missing=false``) say how."""
    from lengthx.segmented.loop import train

    for step in training_chain(cfg):
        if is_trained(cfg, step):
            continue
        if not cfg.task.get("train_missing", True):
            raise FileNotFoundError(f"task.run={cfg.task.run} needs the run {step.run}, which is not trained: "
                                    f"`{step.command}` (or task.train_missing=true)")
        log.info("task.run=%s needs %s: %s", cfg.task.run, step.run, step.command)
        train(train_config(step, cfg.task.data))


def score_cell(
    loaded: Any,
    task: SegmentedPPLTask,
    setting: Setting,
    store: Any,
    cell_key: str,
    n: int | None,
    batch_size: int,
    lengths: LengthState,
    chash: str,
) -> dict[str, Any]:
    """Score one setting, resuming from (and appending to) the cell's records; returns metrics and counts.

    A record is reused only if it scored the same tokens under the same cell hash ``chash`` (which covers the
    weights), so a retrained checkpoint at the same path never inherits its predecessor's losses.
    """
    note = lengths.set_length(loaded.model, setting.value)
    seqs = task.sequences(loaded.tokenizer, setting.value, n)
    index = {sid: i for i, (sid, _) in enumerate(seqs)}  # each sequence's place in the fixed order
    done = store.load_records(cell_key, repair=True)
    results: dict[str, tuple[float, int]] = {}
    todo = []
    for sid, ids in seqs:
        rec = done.get(sid)
        if (rec is not None and rec.get("prompt_hash") == _token_hash(ids) and rec.get("config_hash") == chash
                and {"nll", "tokens"} <= set(rec["scores"])):
            results[sid] = (float(rec["scores"]["nll"]), int(rec["scores"]["tokens"]))
        else:
            todo.append((sid, ids))
    bar = tqdm(total=len(seqs), initial=len(results), desc=cell_key, unit="seq", leave=False)
    for i in range(0, len(todo), max(1, batch_size)):
        chunk = todo[i : i + batch_size]
        ids = torch.stack([t for _, t in chunk]).to(loaded.device)
        nll, cnt = sequence_nll(loaded.model, ids)
        for (sid, row), s, c in zip(chunk, nll.tolist(), cnt.tolist(), strict=True):
            if not math.isfinite(s) or c <= 0:
                raise ValueError(f"{cell_key}: sequence {sid} scored nll={s} over {c} tokens, not a finite "
                                 "perplexity; nothing of this cell is recorded as ok")
            results[sid] = (s, int(c))
            store.append_record(
                cell_key,
                {
                    "id": sid,
                    "index": index[sid],
                    "prompt_hash": _token_hash(row),
                    "config_hash": chash,
                    "target": None,
                    "output": None,
                    "scores": {"nll": s, "tokens": int(c), "ppl": math.exp(s / c)},
                    "requested_tokens": setting.value,
                    "actual_tokens": int(row.numel()),
                    "meta": {"note": note},
                },
            )
        bar.update(len(chunk))
        ppls = [math.exp(s / c) for s, c in results.values()]
        bar.set_postfix(ppl=f"{sum(ppls) / len(ppls):.3f}")
    bar.close()
    mean_ppl, tok_ppl = perplexities([results[sid] for sid, _ in seqs])
    return {"ppl": mean_ppl, "ppl_tokens": tok_ppl, "n": len(seqs), "note": note}


def method_label(model_cfg: Any, l_t: int) -> str:
    """``pretrained`` for a published checkpoint; a trained one's label, with ``@βL_t`` when L_e > L_t."""
    from lengthx.segmented.plan import source_meta

    meta = source_meta(model_cfg)
    if not meta:
        return segmented_plan.PRETRAINED
    label = str(meta.get("label") or meta.get("method"))
    l_e = int(meta.get("l_e") or l_t)
    return label if l_e <= l_t else f"{label}@{factor_label(l_e / l_t)}"


def checkpoint_fingerprint(model_cfg: Any) -> str:
    """What identifies the scored checkpoint: the training run's hash and steps, and the checkpoint's content
    (:func:`lengthx.models.loading.model_fingerprint`, never its path)."""
    from lengthx.models.loading import model_fingerprint
    from lengthx.segmented.plan import source_meta

    meta = source_meta(model_cfg)
    run = f"{meta.get('config_hash', '')}:{meta.get('steps', '')}" if meta else ""
    return f"{run}:{model_fingerprint(model_cfg.get('path'))}"


class PerplexityJob:
    """The cells of ``lengthx run task=segmented_ppl`` for one model (:class:`lengthx.core.sweep.CellJob`)."""

    first_metric = METRICS[0]

    def __init__(self, cfg: Any, loaded: Any = None):
        if cfg.method.name not in TAU_METHODS:
            raise ValueError(
                f"task=segmented_ppl takes method= a τ method ({', '.join(TAU_METHODS)}), got "
                f"method={cfg.method.name}; a trained checkpoint is picked with task.run=<run> (chunk-0.25-4x) "
                "or model.path=DIR (its training method is read from lengthx_train.json)"
            )
        check_family(str(cfg.model.family))
        self.cfg, self.loaded = cfg, loaded
        self.store = ResultsStore(Path(cfg.results_dir))
        profile = str(cfg.profile.name)
        run = cfg.task.get("run")
        if run and run != segmented_plan.PRETRAINED:  # a `lengthx train` run of this model, by its directory name
            train_chain(cfg)
            with open_dict(cfg.model):
                cfg.model.path = str(run_path(cfg, str(run)) / "final")
        self.task = build_task(cfg.task, profile, int(cfg.model.l_tr))
        self.l_t = int(self.task.l_t)
        self.method = cell_method(str(cfg.task.get("method_label") or method_label(cfg.model, self.l_t)), cfg.method)
        self.fingerprint = self.store.fingerprinted(lambda: checkpoint_fingerprint(cfg.model))
        n = cfg.task.get("num_examples") or cfg.profile.get("num_examples") or cfg.task.get("paper_num_examples")
        self.n = int(n) if n else None
        self.lengths: LengthState | None = None
        self._tokenizer: Any = None
        self._behaviour: dict[int, tuple[str, int]] = {}

    def behaviour(self, setting: Setting) -> str:
        """What the task scores at ``setting``, as a hash: the token ids of its first sequences
        (:func:`lengthx.core.cells.task_behaviour`'s counterpart for whole-sequence perplexity)."""
        return self._sequences(setting)[0]

    def _sequences(self, setting: Setting) -> tuple[str, int]:
        """(:meth:`behaviour`, how many sequences this run scores) at ``setting``."""
        if setting.value not in self._behaviour:
            if self._tokenizer is None:
                self._tokenizer = self.loaded.tokenizer if self.loaded is not None else load_tokenizer(self.cfg.model)
            seqs = self.task.sequences(self._tokenizer, setting.value, BEHAVIOUR_EXAMPLES)
            blob = json.dumps([[sid, _token_hash(ids)] for sid, ids in seqs])
            count = len(self.task.sequences(self._tokenizer, setting.value, self.n))
            self._behaviour[setting.value] = (hashlib.sha256(blob.encode()).hexdigest()[:12], count)
        return self._behaviour[setting.value]

    def model(self) -> Any:
        """The loaded model, with its own position table kept for every evaluation length."""
        if self.loaded is None:
            self.loaded = load_model(self.cfg.model, device=self.cfg.device, dtype=self.cfg.dtype)
        if self.lengths is None:
            self.lengths = LengthState.capture(self.loaded.model, str(self.cfg.model.family))
        return self.loaded

    def cells(self) -> list[tuple[Cell, str]]:
        return [(Cell(str(self.cfg.model.name), self.method, TASK_NAME, setting),
                 cell_hash(self.cfg, setting, self.fingerprint, self.behaviour(setting)))
                for setting in resolve_settings(self.cfg.task, self.l_t)]

    def is_done(self, cell: Cell, chash: str) -> bool:
        """Finished under this hash with at least as many sequences as this run scores."""
        return self.store.is_done(cell.key, chash, METRICS, self._sequences(cell.setting)[1])

    def row_fields(self, cell: Cell, chash: str, start: float) -> dict[str, Any]:
        fields = row_fields(cell, chash, start, paper=self.cfg.task.get("paper", "B"),
                            table=self.cfg.get("table") or self.cfg.task.get("table"), l_tr=self.l_t,
                            seed=self.cfg.task.get("seed", 0),
                            device=str(self.loaded.device) if self.loaded else str(self.cfg.device),
                            data=corpus_label(self.cfg.task.data, str(self.cfg.task.get("split") or "test"),
                                              str(self.cfg.profile.name)))
        return {**fields, "L_req": cell.setting.value, "L_ex": cell.setting.value}

    def compute(self, cell: Cell, chash: str, start: float) -> list[dict[str, Any]]:
        loaded = self.model()
        tau = self.temperature(cell, chash)
        with applied_temperature(loaded, tau, str(self.cfg.method.scope)):
            res = score_cell(loaded, self.task, cell.setting, self.store, cell.key, self.n,
                             int(self.cfg.get("batch_size") or 1), self.lengths, chash)
        fields = self.row_fields(cell, chash, start)
        tau_text = tau.label if isinstance(tau, RowScale) else tau
        return [{**fields, "metric": m, "value": round(res[m], 4), "n": res["n"], "status": "ok", "tau": tau_text,
                 "message": res["note"]} for m in METRICS]

    def temperature(self, cell: Cell, chash: str) -> float | RowScale:
        """τ of ``method`` at the cell's length L with L_tr = L_t: a closed-form rule, or Algorithm 1."""
        if self.cfg.method.name in RULE_METHODS:
            return rule_temperature(self.cfg.method, cell.setting.value, self.l_t)
        if cell.setting.value <= self.l_t:  # Algorithm 1 at L_t aligns L_t with itself: τ = 1
            return 1.0
        return self.aligned_temperature(cell, chash)

    def aligned_temperature(self, cell: Cell, chash: str) -> float:
        """Algorithm 1 (paper A §4) on the decoder: S̄ over every self-attention layer, head and (every
        ``calibration.row_stride``-th) query row of ``calibration.num_examples`` training-split sequences, never
        scored; S̄_tr(1) at L_t, τ from the grid at L. Cached in ``calibration/`` under the cell's hash."""
        m, cal = self.cfg.method, self.cfg.calibration
        path = calibration_file(Path(self.cfg.results_dir), cell, m, {"cell_hash": chash})
        cached = read_calibration(path, {"cell_hash": chash})
        if cached is not None:
            return float(cached["tau"])
        loaded, n = self.model(), int(cal.num_examples)
        options = options_from_config(m, cal)

        def batches(length: int) -> list[dict[str, torch.Tensor]]:
            self.lengths.set_length(loaded.model, length)  # GPT-2: its APE table at this length
            seqs = self.task.sequences(loaded.tokenizer, length, n, split="train")[:n]
            return [{"input_ids": ids[None].to(loaded.device), "attention_mask": torch.ones_like(ids[None]).to(
                loaded.device)} for _, ids in seqs]

        target = reference_statistic(loaded, batches(self.l_t), options)
        result = align_to(loaded, batches(cell.setting.value), target, options)
        keep_calibration(path, {"cell": cell.key, "cell_hash": chash}, result.tau, alignment_info(result), cell.key,
                         str(m.name))
        return result.tau

    def attention_medians(self) -> None:
        """Figure 3's data (``task.attention_medians`` sequences), again when the scored weights changed."""
        k = int(self.cfg.task.get("attention_medians") or 0)
        if k > 0 and self.cfg.method.name != "none":  # the histogram runs stock eager attention, without τ
            log.info("Figure 3's attention medians are of the model without τ: not drawn for method=%s",
                     self.cfg.method.name)
            return
        hist_file = Path(self.cfg.results_dir) / "attention" / f"{self.cfg.model.name}__{self.method}.json"
        if k <= 0 or ((read_json(hist_file) or {}).get("fingerprint") == self.fingerprint):
            return
        loaded = self.model()
        factor = float(self.cfg.task.get("attention_factor") or 4)
        at = Setting(factor_label(factor), int(round(factor * self.l_t)), "tokens")
        hist = attention_histogram(loaded, self.task, at, self.l_t, k, self.lengths)
        hist.update({"model": str(self.cfg.model.name), "method": self.method, "l_t": self.l_t,
                     "fingerprint": self.fingerprint})
        write_json(hist_file, hist)


def planned_runs(cfg: Any) -> tuple[list[str], list[Cell]]:
    """A dry run of one segmented_ppl job: the training it needs (one line per run) and its cells."""
    lines = [f"train {step.run} ({'done' if is_trained(cfg, step) else 'to train'}; starts from {step.start}): "
             f"{step.command}" for step in training_chain(cfg)]
    l_t = int(cfg.task.get("l_t") or cfg.model.l_tr)
    label = cfg.task.get("method_label") or run_method_label(str(cfg.task.get("run") or segmented_plan.PRETRAINED))
    label = cell_method(str(label), cfg.method)
    return lines, [Cell(str(cfg.model.name), label, TASK_NAME, s) for s in resolve_settings(cfg.task, l_t)]


def run_task(cfg: Any, loaded: Any = None) -> list[dict[str, Any]]:
    """``lengthx run task=segmented_ppl``: every setting of one model into the results store, through the one
    sweep loop (:func:`lengthx.core.sweep.sweep`: skip, resume from per-sequence records, status rows), then
    Figure 3's attention medians when asked. Returns one summary dict per cell (``value`` = mean perplexity)."""
    job = PerplexityJob(cfg, loaded)
    summary = sweep(job.store, job)
    job.attention_medians()
    return summary
