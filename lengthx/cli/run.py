"""``lengthx run | calibrate | stats | plan``: argument handling and printing; the work is in
:mod:`lengthx.core` (cells, the sweep loop, statistics, perplexity).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthx.cli.common import experiment_jobs, job_cells, note_failures, print_job_cells, print_plan
from lengthx.config import CONF_DIR, RUN_CONFIG, check_overrides, choices
from lengthx.errors import UsageError, debug_enabled, interrupted, one_line

if TYPE_CHECKING:
    from omegaconf import DictConfig


def plan_command(argv: list[str]) -> None:
    """``lengthx plan``: every cell of every paper-A experiment (or of those named, paper B's ``sb_*`` too, with
    the training each needs), with counts per table; ``--estimate`` adds what they cost (:mod:`lengthx.cli.estimate`).
    Experiments are sweeps, so ``-m`` is implied."""
    estimate = "--estimate" in argv
    argv = [a for a in argv if a not in ("-m", "--multirun", "--estimate")]
    check_overrides(argv, command="plan")
    cells, planned = plan_jobs(argv)
    print_plan(cells, argv)
    if estimate:
        from lengthx.cli.estimate import estimate_lines

        profile = str(planned[0][1].profile.name) if planned else "mini"
        print("\n".join(estimate_lines(planned, profile)))


def plan_jobs(argv: list[str], show: bool = True) -> tuple[list[tuple[str, str]], list[tuple[str, Any, list, bool]]]:
    """The cells of the experiments ``argv`` names (``experiment=a,b``; default every paper-A one) under its other
    overrides, printed per job when ``show``: (experiment, cell key) pairs, and per job (experiment, its config,
    its cells, whether they are ``lengthx stats`` cells)."""
    from hydra import compose, initialize_config_dir

    from lengthx.cli.validate import check_override_values, validate_run_config
    from lengthx.core.cells import experiment_skip_reason
    from lengthx.models.minis import apply_profile

    experiments = [v for a in argv if a.startswith("experiment=") for v in a.split("=", 1)[1].split(",")]
    rest = [a for a in argv if not a.startswith("experiment=")]
    check_override_values(rest)  # a wrong value on the command line: answered before anything is listed
    experiments = experiments or [e for e in choices("experiment") if e.startswith("aa_")]
    cells: list[tuple[str, str]] = []
    planned: list[tuple[str, Any, list, bool]] = []
    composed = []
    for experiment in experiments:  # every job's values first, as `lengthx run` checks them: then the listing
        command, jobs = experiment_jobs(experiment, rest)
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            configs = [apply_profile(compose(RUN_CONFIG, overrides=job)) for job in jobs]
        for cfg in configs:
            if not experiment_skip_reason(cfg):
                validate_run_config(cfg, environment=False)
        composed.append((experiment, command, jobs, configs))
    for experiment, command, jobs, configs in composed:
        if show:
            print(f"== experiment {experiment}: lengthx {command} -m experiment={experiment} {' '.join(rest)} "
                  f"({len(jobs)} jobs)")
        for cfg in configs:
            if experiment_skip_reason(cfg):
                continue
            stats = command == "stats"
            keys = print_job_cells(cfg, stats=stats) if show else [c.key for c in job_cells(cfg, stats)]
            cells.extend((experiment, key) for key in keys)
            planned.append((experiment, cfg, job_cells(cfg, stats), stats))
    return cells, planned


def run_command(cfg: DictConfig) -> None:
    from lengthx.core.cells import experiment_skip_reason
    from lengthx.core.runner import Runner
    from lengthx.tasks import TASKS

    reason = experiment_skip_reason(cfg)
    if reason:
        print(f"skipped: {reason}")
        return
    task = TASKS.get(cfg.task.name)
    if task is not None and task.scoring == "perplexity":  # paper B: whole sequences scored
        from lengthx.core.perplexity import run_task

        summary = run_task(cfg)
    else:
        runner = Runner(cfg)
        try:
            summary = runner.run()
        except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (lengthx.errors.Terminated)
            if debug_enabled():
                raise
            what, status = interrupted(err)
            kept, total = runner.kept_examples()
            print(f"{what}; rerun the same command to resume: {kept} of {total} examples kept", file=sys.stderr)
            sys.exit(status)
    for s in summary:
        print(summary_line(s))
    print(results_line(cfg))
    note_failures(summary)


# how a log line of a run reads: Hydra's default job logging (hydra/conf/hydra/job_logging/default.yaml)
HYDRA_LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


def finished_run(cfg: DictConfig) -> bool:
    """Answer a run whose every cell is already done, as the run would (a skip line per cell, then the summary),
    from the cell hashes an earlier run of the same inputs kept (:mod:`lengthx.core.store.done_memo`), without loading
    a model, a tokenizer or the task's data; False (nothing printed) when the run must take the full path."""
    import logging

    from lengthx.core.cells import experiment_skip_reason
    from lengthx.core.store import finished_cells

    if experiment_skip_reason(cfg):
        return False
    cells = finished_cells(cfg)
    if cells is None:
        return False
    from lengthx.core.length_limits import far_settings
    from lengthx.tasks import resolve_settings

    form = logging.Formatter(HYDRA_LOG_FORMAT)
    warning = far_settings(cfg, resolve_settings(cfg.task, cfg.profile.name, int(cfg.model.l_tr)))
    lines = [(logging.WARNING, warning)] if warning else []  # as the full path warns before its cells
    lines += [(logging.INFO, f"skip finished cell {cell}") for cell in cells]
    for level, message in lines:
        print(form.format(logging.LogRecord("lengthx", level, __file__, 0, "%s", (message,), None)))
    for cell in cells:
        print(summary_line({"cell": cell, "status": "done"}))
    print(results_line(cfg))
    return True


def results_line(cfg: DictConfig) -> str:
    """The last line of a run: where its results are, in full (the same from any working directory)."""
    return f"results: {Path(str(cfg.results_dir)).resolve()}"


def summary_line(s: dict) -> str:
    """One cell of a run's summary: its key, status, and the first metric with τ and the example count."""
    if "metric" not in s:
        return f"{s['cell']:48s} {s['status']}" + (" (already in results.csv)" if s["status"] == "done" else "")
    tau = s.get("tau")
    try:
        tau_text = f"  τ={float(tau):.2f}" if tau not in (None, "") else ""
    except (TypeError, ValueError):  # a per-row rule, by its label (lengthx.attention.scaling.RowScale)
        tau_text = f"  τ={tau}"
    if s["status"] in ("error", "oom"):
        return f"{s['cell']:48s} {s['status']:5s} {one_line(str(s.get('message', '')))}"
    return f"{s['cell']:48s} {s['status']:5s} {s['metric']}={s['value']}{tau_text}  n={s.get('n', '')}"


def check_calibrate(cfg: DictConfig) -> None:
    """``lengthx calibrate`` runs Algorithm 1: its method is ``pmax`` or ``entropy`` (checked before any work)."""
    if cfg.method.name not in ("pmax", "entropy"):
        raise UsageError(f"calibrate needs method=pmax or method=entropy (Algorithm 1), got "
                         f"method={cfg.method.name}")


def calibrate_command(cfg: DictConfig) -> None:
    """``lengthx calibrate``: Algorithm 1 per setting, printed with the statistics that chose τ."""
    import json

    from lengthx.core.cells import Cell, method_id
    from lengthx.core.length_limits import check_lengths
    from lengthx.core.runner import Runner

    check_calibrate(cfg)
    runner = Runner(cfg)
    check_lengths(runner)
    for setting in runner.settings():
        cell = Cell(cfg.model.name, method_id(cfg.method), runner.task.name, setting)
        tau, path, cached = runner.aligned_temperature_with_source(cell)
        info = json.loads(path.read_text())
        source = "cache" if cached else f"computed, {info['forward_passes']} forward passes"
        head = f"{cell.task} {setting.label:>6} ({setting.value} {setting.unit}, L_ex={info['L_ex']:.0f})"
        if isinstance(tau, list):
            print(f"{head}: per-layer τ={tau}  S̄_tr(1) per layer={[round(t, 4) for t in info['target']]}"
                  f"  [{source}]")
        else:
            ev = ", ".join(f"{k}:{v:.4f}" for k, v in info["evaluated"].items())
            print(f"{head}: τ={tau:.2f}  S̄_tr(1)={info['target']:.4f}  [{source}]  S̄_ex(τ): {ev}")
    print(f"cache: {Path(cfg.results_dir) / 'calibration'}")


def stats_command(cfg: DictConfig) -> None:
    from lengthx.core.length_limits import check_lengths
    from lengthx.core.runner import Runner
    from lengthx.core.statistics import run_statistics

    runner = Runner(cfg)
    check_lengths(runner)
    summary = run_statistics(runner)
    for s in summary:
        print(f"{s['cell']:60s} {s['status']:6s} P_max={s.get('value', '')}")
    note_failures(summary)
