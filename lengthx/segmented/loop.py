"""The continued pre-training loop of paper B (§4; docs/design.md §5): full, chunk-α, prefix-α and DA.

Chunk/prefix read pieces of L_e and train on L_t sampled tokens at their original positions
(:mod:`lengthx.segmented.sampling`); full trains on whole L_e pieces, DA on whole L_t pieces. AdamW (no decay on
biases and norms), linear warm-up then cosine decay to ``min_lr_ratio``·lr, gradient accumulation and
clipping, bf16 autocast on GPU. Data-parallel with Accelerate: ``accelerate launch --num_processes N -m
lengthx.cli.train …`` splits every global batch across processes, so N processes with batch b give the same
run as one process with batch N·b. Rerunning resumes exactly (:mod:`lengthx.segmented.checkpoints`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from lengthx.data.pieces import piece_dataset
from lengthx.errors import UsageError
from lengthx.models.loading import weights_fingerprint
from lengthx.segmented.checkpoints import (
    CheckpointParts,
    TrainerState,
    _checkpoints,
    _save_checkpoint,
    load_checkpoint,
)
from lengthx.segmented.loss import causal_lm_loss as causal_lm_loss  # re-exported: minis, benches
from lengthx.segmented.loss import micro_batch_loss
from lengthx.segmented.metrics import LEGACY_CURVE_FILE, METRICS_FILE, read_curve
from lengthx.segmented.models import check_family, max_positions, prepare_for_length
from lengthx.segmented.plan import (
    META_FILE,
    RunSpec,
    SequenceOrder,
    TrainPlan,
    make_plan,
    micro_batch_indices,
    resolve_run,
    source_meta,
)
from lengthx.segmented.preemption import deferred_scheduler_signal
from lengthx.segmented.run_lock import run_directory_lock
from lengthx.segmented.sampling import collate_segmented, sample_generator

log = logging.getLogger("lengthx.train")


class WarmupCosine:
    """LR multiplier: linear warm-up from 0 over ``warmup`` steps, then cosine decay to ``min_ratio``."""

    def __init__(self, warmup: int, total: int, min_ratio: float = 0.1):
        self.warmup, self.total, self.min_ratio = int(warmup), int(total), float(min_ratio)

    def __call__(self, step: int) -> float:
        if self.warmup and step < self.warmup:
            return (step + 1) / self.warmup
        span = max(1, self.total - self.warmup)
        progress = min(1.0, (step - self.warmup) / span)
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(
    model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float], eps: float = 1e-8
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (biases and norm weights are not decayed)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.dim() < 2 or "norm" in name.lower() or name.endswith(".bias") else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def load_for_training(model_cfg: Any, attn_implementation: str | None = None) -> tuple[Any, Any]:
    """(model in fp32 and train mode, tokenizer) from ``model.path``, the local cache or the hub."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lengthx.models.loading import from_source

    family = str(model_cfg.family)
    check_family(family)
    attn = "eager" if family == "bloom" else (attn_implementation or "sdpa")
    path = model_cfg.get("path")
    trust = bool(model_cfg.get("trust_remote_code", False))  # a directory's own code runs only when asked
    tokenizer = from_source(model_cfg.name, model_cfg.get("hub_id"), path, AutoTokenizer, trust_remote_code=trust)
    model = from_source(
        model_cfg.name,
        model_cfg.get("hub_id"),
        path,
        AutoModelForCausalLM,
        dtype=torch.float32,
        attn_implementation=attn,
        trust_remote_code=trust,
    )
    model.train()
    return model, tokenizer


@dataclass
class TrainResult:
    """What a finished (or stopped) run leaves behind."""

    output_dir: Path
    final_dir: Path | None
    plan: TrainPlan
    step: int
    resumed_from: int
    curve: list[dict[str, Any]]
    is_main: bool = True


def _truncate_curve(out: Path, step: int) -> None:
    """Keep the logged steps up to ``step`` (a resumed run logs the rest again) in ``metrics.jsonl``."""
    rows = [r for r in read_curve(out) if r["step"] <= step]
    tmp = out / f"{METRICS_FILE}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(out / METRICS_FILE)
    (out / LEGACY_CURVE_FILE).unlink(missing_ok=True)


def trackers(log_with: Any) -> list[str]:
    """The Accelerate trackers of ``train.log_with`` (``tensorboard``, ``wandb``, … or a list; null = none),
    each checked to be one Accelerate knows and whose package is installed, before anything loads."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, get_available_trackers

    if log_with is None or str(log_with).lower() in ("", "none", "null"):
        return []
    names = [str(n).strip() for n in (log_with.split(",") if isinstance(log_with, str) else log_with)]
    for name in names:
        if name not in LOGGER_TYPE_TO_CLASS:
            raise UsageError(f"train.log_with={name}: not an Accelerate tracker; valid: "
                             f"{', '.join(LOGGER_TYPE_TO_CLASS)} (or null: metrics.jsonl only)")
        if name not in {str(t) for t in get_available_trackers()}:
            raise UsageError(f"train.log_with={name}: the tracker's package is not installed (pip install "
                             f"{'tensorboard' if name == 'tensorboard' else name}), or drop train.log_with "
                             "(every run writes metrics.jsonl)")
    return names


def _precision(setting: str, device_type: str) -> str:
    if setting == "auto":
        return "bf16" if device_type == "cuda" else "no"
    if setting not in ("no", "bf16", "fp16"):
        raise ValueError(f"train.precision must be auto, no, bf16 or fp16, got {setting!r}")
    return setting


def _accelerator(cfg: DictConfig, logging_dir: Path) -> Any:
    """Accelerate's handle for this run: CPU when asked or when no GPU is visible, the run's precision, and
    the trackers of ``train.log_with`` (:func:`trackers`) writing under ``logging_dir``."""
    from accelerate import Accelerator

    # accelerate logs every checkpoint file at INFO and notes the tied lm_head (GPT-2, BLOOM) at WARNING on
    # each save; the tie is restored on load (exact-resume tests check it), so keep only errors
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    logging.getLogger("accelerate.utils.other").setLevel(logging.ERROR)
    device = str(cfg.get("device") or "auto")
    cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    precision = _precision(str(cfg.train.get("precision", "auto")), "cpu" if cpu else "cuda")
    log_with = trackers(cfg.train.get("log_with"))
    return Accelerator(cpu=cpu, mixed_precision=precision, log_with=log_with or None,
                       project_dir=str(logging_dir) if log_with else None)


def _claim_output_dir(cfg: DictConfig, spec: RunSpec) -> None:
    """Record this run's config in its output directory; a directory holding a run of another config or of
    other base weights is an error unless ``train.overwrite`` (then its checkpoints, curve and export go)."""
    out = spec.output_dir
    out.mkdir(parents=True, exist_ok=True)
    cfg_file = out / "train_config.json"
    base_weights = weights_fingerprint(cfg.model.get("path"))
    if cfg_file.exists():
        old = json.loads(cfg_file.read_text())
        other_config = old.get("config_hash") != spec.config_hash
        other_base = old.get("base_weights", base_weights) != base_weights  # runs before the field: unknown
        if other_config or other_base:
            if not cfg.train.get("overwrite", False):
                raise FileExistsError(
                    f"{out} holds a run with another configuration (hash {old.get('config_hash')} vs "
                    f"{spec.config_hash}); choose another train.output_dir or pass train.overwrite=true"
                    if other_config else
                    f"{out} was trained from other weights at {cfg.model.get('path')} (the base checkpoint "
                    "changed since); remove the run or pass train.overwrite=true to train it again"
                )
            shutil.rmtree(out / "checkpoints", ignore_errors=True)
            (out / METRICS_FILE).unlink(missing_ok=True)
            (out / LEGACY_CURVE_FILE).unlink(missing_ok=True)
            shutil.rmtree(out / "final", ignore_errors=True)
    cfg_file.write_text(json.dumps(
        {"config_hash": spec.config_hash, "base_weights": base_weights, "config": spec.config,
         "differs_from_profile": spec.variant}, indent=1, default=str
    ))


def _is_finished(spec: RunSpec, plan: TrainPlan) -> bool:
    """Whether the output directory holds the export of this very config and plan."""
    done = spec.output_dir / "final" / META_FILE
    if not done.is_file():
        return False
    meta = json.loads(done.read_text())
    return meta.get("config_hash") == spec.config_hash and int(meta.get("steps", -1)) == plan.steps


def plan_for(cfg: DictConfig, spec: RunSpec, pieces: int, world: int) -> TrainPlan:
    tc = cfg.train
    return make_plan(spec.method, spec.l_t, spec.l_e, pieces, int(tc.batch_size), int(tc.grad_accum), world,
                     tc.get("epochs") or cfg.method.get("epochs"), tc.get("max_steps"), float(tc.get("warmup_ratio", 0.01)),
                     tc.get("warmup_steps"), float(tc.get("budget_fraction") or 1.0))


@dataclass
class _Loop:
    """What one optimizer step needs: the prepared model and optimizer, the data and its order."""

    accelerator: Any
    model: Any
    optimizer: torch.optim.Optimizer
    schedule: Any
    pieces: Any
    order: SequenceOrder
    spec: RunSpec
    seed: int
    batch_size: int
    grad_accum: int
    max_grad_norm: float | None

    def step(self, step: int) -> tuple[float, float]:
        """One optimizer step over ``grad_accum`` micro-batches of this process; (mean loss, its LR)."""
        acc, ga, world = self.accelerator, self.grad_accum, self.accelerator.num_processes
        step_loss = torch.zeros((), device=acc.device)
        head = acc.unwrap_model(self.model).get_output_embeddings()  # for a chunked loss (lengthx.segmented.loss)
        for micro in range(ga):
            idx = micro_batch_indices(step, micro, acc.process_index, self.batch_size, ga, world)
            rows = self.pieces[[self.order(k) for k in idx]]["input_ids"].long()
            batch = collate_segmented(list(rows), self.spec.method, self.spec.l_t,
                                      [sample_generator(self.seed, k) for k in idx])
            batch = {k: v.to(acc.device) for k, v in batch.items()}
            sync = micro == ga - 1
            with acc.no_sync(self.model) if not sync and world > 1 else nullcontext():
                loss = micro_batch_loss(self.model, head, batch, acc.autocast)
                acc.backward(loss / ga)
            step_loss += loss.detach() / ga
        if self.max_grad_norm:
            acc.clip_grad_norm_(self.model.parameters(), float(self.max_grad_norm))
        lr = self.schedule.get_last_lr()[0]  # the LR this step uses
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(acc.reduce(step_loss, reduction="mean")), lr


def _export_final(cfg: DictConfig, spec: RunSpec, plan: TrainPlan, loop: _Loop, tokenizer: Any,
                  state: TrainerState, positions_info: dict[str, Any]) -> Path:
    """Save the trained model, tokenizer and ``lengthx_train.json`` to ``<output_dir>/final`` atomically."""
    out, family = spec.output_dir, str(cfg.model.family)
    unwrapped = loop.accelerator.unwrap_model(loop.model)
    tmp = out / "final.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    unwrapped.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    meta = {
        "method": spec.method.name, "label": spec.label, "alpha": spec.method.alpha, "l_t": spec.l_t,
        "l_e": spec.l_e, "l_e_factor": spec.l_e / spec.l_t, "family": family,
        "base_model": {"name": str(cfg.model.name), "hub_id": cfg.model.get("hub_id"), "path": cfg.model.get("path")},
        "base_meta": source_meta(cfg.model), "positions": positions_info,
        "max_positions": max_positions(unwrapped, family), "plan": asdict(plan), "steps": state.step,
        "tokens": state.tokens, "config_hash": spec.config_hash, "world_size": loop.accelerator.num_processes,
    }
    (tmp / META_FILE).write_text(json.dumps(meta, indent=1, default=str))
    shutil.rmtree(out / "final", ignore_errors=True)
    os.replace(tmp, out / "final")
    return out / "final"


def train(cfg: DictConfig) -> TrainResult:
    """Run (or resume) one continued pre-training run described by a ``lengthx train`` config."""
    from accelerate.utils import set_seed

    spec = resolve_run(cfg)
    tc, out = cfg.train, spec.output_dir
    accelerator = _accelerator(cfg, out)
    if spec.variant:
        log.info("budget or schedule differs from profile %s (%s): its own run directory %s",
                 spec.config["profile"], ", ".join(f"{k}={v}" for k, v in spec.variant.items()), out)
    set_seed(int(cfg.get("seed", 0)))
    model, tokenizer = load_for_training(cfg.model, tc.get("attn_implementation"))
    positions_info = prepare_for_length(model, str(cfg.model.family), spec.l_e)
    if tc.get("gradient_checkpointing", False):
        model.gradient_checkpointing_enable()
    profile = str(cfg.get("profile", {}).get("name", "mini"))
    with accelerator.main_process_first():  # tokenise once; the other processes read the cache
        pieces = piece_dataset(cfg.data, tokenizer, "train", spec.method.source_length(spec.l_t, spec.l_e), profile)
    plan = plan_for(cfg, spec, len(pieces), accelerator.num_processes)
    main = accelerator.is_main_process
    # one writer per run directory: a second lengthx train into it stops here, naming this one's PID
    with run_directory_lock(out) if main else nullcontext():
        if main:  # the output directory is touched only once model, data and plan are known to be valid
            _claim_output_dir(cfg, spec)
        if accelerator.log_with:  # train.log_with: the run's hyperparameters, then the metrics.jsonl lines
            accelerator.init_trackers(out.name, config={k: v for k, v in flat_config(spec.config).items()
                                                        if isinstance(v, int | float | str | bool)})
        accelerator.wait_for_everyone()
        if _is_finished(spec, plan):  # a finished run of this very config: nothing to train or export again
            log.info("%s is finished (%d steps); skipping", out, plan.steps)
            accelerator.end_training()
            return TrainResult(out, out / "final", plan, plan.steps, plan.steps, read_curve(out), main)
        optimizer = build_optimizer(model, float(tc.lr), float(tc.weight_decay), (float(tc.betas[0]), float(tc.betas[1])),
                                    float(tc.get("eps", 1e-8)))
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, WarmupCosine(plan.warmup_steps, plan.steps, float(tc.get("min_lr_ratio", 0.1))))
        model, optimizer = accelerator.prepare(model, optimizer)
        state = TrainerState()
        # the scheduler is stepped by hand once per optimizer step, so it is checkpointed beside, not prepared
        parts = CheckpointParts(accelerator, model, optimizer, schedule, state)
        resumed_from = _resume(parts, out, plan, main)
        seed = int(cfg.get("seed", 0))
        loop = _Loop(accelerator, model, optimizer, schedule, pieces, SequenceOrder(seed, plan.pieces), spec, seed,
                     int(tc.batch_size), int(tc.grad_accum), tc.get("max_grad_norm"))
        _run_steps(loop, parts, plan, tc, main)
        final_dir = None
        if state.step >= plan.steps:
            accelerator.wait_for_everyone()
            final_dir = out / "final"
            if main:
                _export_final(cfg, spec, plan, loop, tokenizer, state, positions_info)
            accelerator.wait_for_everyone()
        accelerator.end_training()
        return TrainResult(out, final_dir, plan, state.step, resumed_from, read_curve(out) if main else [], main)


def _resume(parts: CheckpointParts, out: Path, plan: TrainPlan, main: bool) -> int:
    """Load the newest checkpoint in ``out`` (if any) and cut the curve back to it; the step resumed from."""
    ckpts = _checkpoints(out)
    if ckpts:
        load_checkpoint(ckpts[-1], parts)
        log.info("resumed %s from %s (step %d of %d)", out, ckpts[-1].name, parts.state.step, plan.steps)
    if main:
        _truncate_curve(out, parts.state.step)
        (out / "plan.json").write_text(json.dumps(asdict(plan), indent=1))
    return parts.state.step if ckpts else 0


def _run_steps(loop: _Loop, parts: CheckpointParts, plan: TrainPlan, tc: Any, main: bool) -> None:
    """Optimizer steps until the plan is done (or ``train.stop_after_steps``): the loss curve, the progress
    bar and a checkpoint every ``train.save_every`` steps. Under submitit, the scheduler's time-limit or
    preemption signal saves a checkpoint after the current step and requeues the job
    (:mod:`lengthx.segmented.preemption`)."""
    from tqdm.auto import tqdm

    state, out = parts.state, loop.spec.output_dir
    stop_after, keep = tc.get("stop_after_steps"), int(tc.get("keep_checkpoints") or 2)
    bar = tqdm(total=plan.steps, initial=state.step, desc=f"train {loop.spec.label}", unit="step",
               disable=not main or not tc.get("progress", True), dynamic_ncols=True)
    logged: list[tuple[float, float]] = []  # (loss, seconds) of the steps since the last logged one
    loop.model.train()
    with deferred_scheduler_signal(enabled=loop.accelerator.num_processes == 1) as scheduler:
        while state.step < plan.steps:
            if stop_after is not None and state.step >= int(stop_after):
                break  # simulated interruption (tests): leave without a final export
            if scheduler is not None and scheduler.pending:
                bar.close()
                _save_checkpoint(parts, out, state.step, keep)
                scheduler.hand_over()  # submitit requeues the job, which resumes from this checkpoint
            row = _one_step(loop, parts, plan, tc, main, logged)
            if row is not None:
                bar.set_postfix(loss=f"{row['loss']:.4f}", tok_s=f"{row['tokens_per_s']:,.0f}", lr=f"{row['lr']:.2e}")
            if main:
                bar.update(1)
    bar.close()


def _one_step(loop: _Loop, parts: CheckpointParts, plan: TrainPlan, tc: Any, main: bool,
              logged: list[tuple[float, float]]) -> dict[str, Any] | None:
    """One optimizer step of :func:`_run_steps`: a metrics line every ``train.log_every`` steps (``logged`` holds
    the steps since the last one; the line is returned), a checkpoint every ``train.save_every``."""
    state, out = parts.state, loop.spec.output_dir
    save_every, log_every = int(tc.get("save_every") or 0), int(tc.get("log_every") or 1)
    t0 = time.time()
    mean_loss, lr = loop.step(state.step)
    state.step += 1
    state.tokens += plan.tokens_per_step
    dt = time.time() - t0
    state.seconds += dt
    logged.append((mean_loss, dt))
    row = None
    if state.step % log_every == 0 or state.step == plan.steps:
        row = _log_metrics(loop.accelerator, out, state, lr, logged, plan.tokens_per_step, main)
        logged.clear()
    if save_every and (state.step % save_every == 0 or state.step == plan.steps):
        _save_checkpoint(parts, out, state.step, int(tc.get("keep_checkpoints") or 2))
    return row


def _log_metrics(accelerator: Any, out: Path, state: TrainerState, lr: float, window: list[tuple[float, float]],
                 tokens_per_step: int, main: bool) -> dict[str, Any]:
    """One ``metrics.jsonl`` line for the steps of ``window`` (their mean loss, the throughput over them), also
    sent to the trackers of ``train.log_with``; returns it."""
    row = {"step": state.step, "loss": round(sum(loss for loss, _ in window) / len(window), 6), "lr": lr,
           "tokens": state.tokens,
           "tokens_per_s": round(len(window) * tokens_per_step / max(1e-9, sum(dt for _, dt in window)), 1),
           "seconds": round(state.seconds, 3)}
    if main:
        with open(out / METRICS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    if accelerator.log_with:
        accelerator.log({k: v for k, v in row.items() if k != "step"}, step=state.step)
    return row


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": …}}`` → ``{"train.lr": …}``: a run's config as trackers take hyperparameters."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def iter_curve(out: Path) -> Iterator[tuple[int, float]]:
    """(step, loss) pairs of a run's curve."""
    for r in read_curve(out):
        yield int(r["step"]), float(r["loss"])


def main_summary(result: TrainResult) -> str:
    """One paragraph on a run, for the CLI."""
    last = result.curve[-1] if result.curve else {}
    where = f"final model: {result.final_dir}" if result.final_dir else f"stopped at step {result.step}"
    resumed = f", resumed from step {result.resumed_from}" if result.resumed_from else ""
    return (
        f"{result.output_dir.name}: {result.step}/{result.plan.steps} steps, {last.get('tokens', 0):,} tokens, "
        f"loss {last.get('loss', float('nan')):.4f}{resumed}; {where}"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `lengthx train …` or `python -m lengthx.cli.train …`")
