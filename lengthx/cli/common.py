"""What every ``lengthx`` command shares: errors as one line with exit status 2 (docs/results.md), Hydra
entry with every job's config validated first (:mod:`lengthx.cli.validate`), and ``--dry-run`` plans.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthx.cli.launchers import check_hydra_overrides, check_launcher, launcher_target
from lengthx.config import (
    CONF_DIR,
    RESULTS_ENV,
    RUN_CONFIG,
    RUNS_ENV,
    check_output_env,
    check_overrides,
    default_results_dir,
    register_resolvers,
    results_dir_problem,
)
from lengthx.errors import (
    JobsFailed,
    UsageError,
    UserError,
    debug_enabled,
    interrupted,
    one_line,
    stopped_by_the_scheduler,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from omegaconf import DictConfig

USER_ERRORS = (UserError, ValueError, FileNotFoundError, FileExistsError)  # exit status 2


@contextmanager
def reported(prog: str = "lengthx", worker: bool = False) -> Iterator[None]:
    """Errors as one line on stderr: exit 2 for a mistake the user can fix (:data:`USER_ERRORS`), 1 for anything
    else, 130 for Ctrl-C, 143 for SIGTERM. With ``--debug`` / ``LENGTHX_DEBUG=1`` the error propagates, traceback
    and all. ``worker``: a job of a launcher in another process (joblib, submitit) raises the line as
    :class:`JobsFailed` after printing it, so that the command waiting for it names it and exits 1."""
    try:
        with _as_job_failure(worker):
            yield
    except BrokenPipeError:  # the reader of the output went away (lengthx ls | head): nothing more to say
        quiet_broken_pipe()
    except KeyboardInterrupt as err:
        if debug_enabled():
            raise
        what, status = interrupted(err)
        print(f"{what}; rerun the same command to resume", file=sys.stderr)
        sys.exit(status)
    except USER_ERRORS as err:
        if debug_enabled():
            raise
        print(f"{prog}: {one_line(str(err))}", file=sys.stderr)
        sys.exit(2)
    except JobsFailed as err:
        if worker:  # for the command waiting on this job (_as_job_failure)
            raise
        print(f"{prog}: {one_line(str(err))}", file=sys.stderr)
        sys.exit(1)
    except Exception as err:
        if debug_enabled() or stopped_by_the_scheduler(err):  # submitit ends the job with it (docs/cluster.md)
            raise
        print(f"{prog}: unexpected {type(err).__name__}: {one_line(str(err))} (rerun with --debug or LENGTHX_DEBUG=1 "
              "for the traceback)", file=sys.stderr)
        sys.exit(1)


@contextmanager
def _as_job_failure(worker: bool) -> Iterator[None]:
    """In a launcher's worker, a user error or a failure is printed as :func:`reported` prints it (the job's
    log) and raised again as :class:`JobsFailed`, one line, for the waiting command."""
    if not worker:
        yield
        return
    try:
        yield
    except (*USER_ERRORS, JobsFailed) as err:
        if debug_enabled():
            raise
        print(f"{one_line(str(err))}", file=sys.stderr)
        raise JobsFailed(one_line(str(err))) from None
    except Exception as err:
        if debug_enabled() or stopped_by_the_scheduler(err):
            raise
        line = f"unexpected {type(err).__name__}: {one_line(str(err))}"
        print(line, file=sys.stderr)
        raise JobsFailed(line) from None


def check_results_dir_argument(value: str, must_exist: bool = True) -> None:
    """``--results-dir`` of ``lengthx tables`` / ``figures`` names a directory to read: a file is a
    :class:`UsageError`, and so is one that does not exist when ``must_exist`` (tables; the default directory,
    where nothing was run yet, is read as empty). ``figures`` draws training curves without results."""
    problem = results_dir_problem(value)
    if problem is not None and (Path(value).exists() or (must_exist and value != str(default_results_dir()))):
        raise UsageError(f"--results-dir {problem}")


def quiet_broken_pipe() -> None:
    """End quietly after the reader of stdout went away: further output (Python's own flush at exit too) goes
    to /dev/null, and the exit status is a pipe's, 141 (128 + SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(141)


# Hydra flags after which the command line is not a run to validate (Hydra prints or inspects something)
HYDRA_INSPECT_FLAGS = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
                       "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun")


def validate_jobs(argv: list[str], environment: bool = True,
                  check: Callable[[DictConfig], None] | None = None,
                  finished: Callable[[DictConfig], bool] | None = None) -> list[Any] | None:
    """Validate the config of every job ``argv`` starts (each job of a ``-m`` sweep) before Hydra starts one:
    values (:func:`lengthx.cli.validate.validate_run_config`), the command's own ``check`` and, with
    ``environment``, ``results_dir`` and ``model.path``. Raises the first problem as one line naming the key
    (or file) and the fix; returns the jobs' configs, or None when ``finished`` says that the one job of a run
    (not a ``-m`` sweep) has nothing to do once its values hold (it has said so; nothing more is checked)."""
    from lengthx.cli.validate import check_override_values

    if any(a in HYDRA_INSPECT_FLAGS for a in argv):
        return []
    overrides = [a for a in argv if not a.startswith("-") and not a.lstrip("+~").startswith("hydra")]
    check_override_values(overrides)  # a wrong value on the command line: answered before Hydra loads
    from hydra.errors import HydraException

    from lengthx.cli.validate import compose_checked, composition_error, validate_run_config
    from lengthx.models.minis import apply_profile

    jobs = [overrides]
    if "-m" in argv or "--multirun" in argv:
        try:
            jobs = sweep_jobs(overrides)[1]
        except HydraException as err:
            raise composition_error(err, overrides) from None
    configs = []
    for job in jobs:  # every job's values first: a sweep whose last job is wrong touches nothing
        configs.append(apply_profile(compose_checked(job)))
        validate_run_config(configs[-1], environment=False)
        if check is not None:
            check(configs[-1])
    if finished is not None and len(configs) == 1 and "-m" not in argv and "--multirun" not in argv \
            and finished(configs[0]):
        return None
    os.environ["LENGTHX_SWEEP_JOBS"] = str(len(jobs))  # the sweep's estimate after its first cell (core.sweep)
    checked: set[str] = set()
    for cfg in configs if environment else []:
        validate_run_config(cfg, environment, checked)
    return configs


FAILED_CELLS: list[tuple[str, str]] = []  # (cell, message) of every cell of this command that ended in error or oom


def note_failures(summary: list[dict[str, Any]]) -> None:
    """Keep the cells of one job's summary that failed, for the command's exit status (:func:`hydra_entry`)."""
    FAILED_CELLS.extend((s["cell"], str(s.get("message") or s["status"])) for s in summary
                        if s.get("status") in ("error", "oom"))


def failures_line(prog: str) -> str | None:
    """The command's last line when cells failed (it then exits 1), or None."""
    if not FAILED_CELLS:
        return None
    cell, message = FAILED_CELLS[0]
    return (f"{prog}: {len(FAILED_CELLS)} cell(s) failed (status rows in results.csv); the first: {cell}: "
            f"{one_line(message).rstrip('.')}. Fix the cause and rerun the same command: finished cells are kept")


def hydra_entry(task_fn: Callable[[DictConfig], None], argv: list[str], prog: str,
                environment: bool = True, check: Callable[[DictConfig], None] | None = None,
                finished: Callable[[DictConfig], bool] | None = None) -> None:
    """Run ``task_fn(cfg)`` under Hydra with ``argv`` as overrides (so -m and launchers work), once every job's
    config is validated (``check``: the command's own rule; ``environment``: its results directory and model
    directory too). ``finished``: answers a run that has nothing to do before any of that loads
    (:func:`validate_jobs`); Hydra is not started for it."""
    flags = ("-m", "--multirun")  # Hydra's parser takes them only before the overrides; a user may write them after
    argv = [a for a in argv if a in flags] + [a for a in argv if a not in flags]
    check_overrides(argv)
    check_launcher(argv)
    check_hydra_overrides(argv)
    watched = launcher_target(argv)  # submitit's launchers, with the job ids, Ctrl-C and failures (cli.submitit_jobs)
    argv = argv + ([watched] if watched else [])
    check_output_env(RESULTS_ENV, RUNS_ENV)  # before Hydra: it writes its record under results_dir
    register_resolvers()
    configs = validate_jobs(argv, environment, check, finished)
    if configs is None:
        return
    import hydra

    from lengthx.core.store import StoreError
    from lengthx.models.minis import apply_profile

    sys.argv = [prog, *argv]
    # Hydra's own errors (it cannot save its record of the run: a full disk) reach the one-line report below
    # instead of Hydra printing a traceback and exiting 1
    os.environ["HYDRA_FULL_ERROR"] = "1"

    parent = os.getpid()

    def job(cfg) -> None:
        elsewhere = os.getpid() != parent  # a launcher's worker (submitit job, joblib process): its own failures
        if elsewhere:
            FAILED_CELLS.clear()
        with reported(prog, worker=elsewhere):
            apply_profile(cfg)  # profile=mini: a paper model runs as its shipped mini
            task_fn(cfg)
        line = failures_line(prog) if elsewhere else None
        if line is not None:  # the launcher sees a failed job, and the command names it and exits 1
            raise JobsFailed(line.removeprefix(f"{prog}: "))

    FAILED_CELLS.clear()
    try:
        hydra.main(version_base=None, config_path=str(CONF_DIR), config_name=RUN_CONFIG)(job)()
    except OSError as err:
        if debug_enabled():
            raise
        where = err.filename or (f"{configs[0].results_dir}/.hydra" if configs else "hydra.run.dir")
        raise StoreError(f"{where}: Hydra could not write its record of the run ({err.strerror or err}); nothing "
                         "was computed. Free disk space (or make the directory writable) and rerun the same "
                         "command") from err
    line = failures_line(prog)
    if line is not None:  # a run whose cells failed does not pass for a success
        print(line, file=sys.stderr)
        sys.exit(1)


DRY_RUN_CELLS: list[tuple[str, str]] = []  # (experiment, cell key) listed by the jobs of a --dry-run


def hydra_command(task_fn: Callable[[DictConfig], None], argv: list[str], prog: str,
                  dry_run_fn: Callable[[DictConfig], None] | None = None,
                  finished: Callable[[DictConfig], bool] | None = None) -> None:
    """``hydra_entry``, or with ``--dry-run`` in ``argv``: ``dry_run_fn`` in every job of the (multi)run.

    A dry run lists cells and loads no model; Hydra's output goes to a temporary directory that is removed
    afterwards, and the cells per paper table are printed at the end."""
    import shutil
    import tempfile

    if "--dry-run" not in argv:
        hydra_entry(task_fn, argv, prog, finished=finished)
        return
    if dry_run_fn is None:
        raise UsageError(f"{prog} has no --dry-run")
    argv = [a for a in argv if a != "--dry-run"]
    if any(a.startswith("hydra/launcher=") for a in argv):
        raise UsageError("--dry-run collects the cells in this process; drop hydra/launcher=… for it")
    tmp = tempfile.mkdtemp(prefix="lengthx-dry-run-")
    DRY_RUN_CELLS.clear()
    try:
        hydra_entry(dry_run_fn, [*argv, f"hydra.run.dir={tmp}/run", f"hydra.sweep.dir={tmp}/sweep",
                                  "hydra.output_subdir=null"], prog, environment=False)
    finally:
        close_log_files_under(tmp)  # Hydra's job log there: a later message must not reach a removed file
        shutil.rmtree(tmp, ignore_errors=True)
    print_plan(DRY_RUN_CELLS, argv)


def close_log_files_under(folder: str) -> None:
    """Detach and close every logging file handler writing under ``folder`` (Hydra's job logging adds one per job;
    in a process that goes on, as the Python API or a test, it would outlive the folder)."""
    import logging

    loggers = [logging.getLogger(), *(lg for lg in logging.root.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    for lg in loggers:
        for handler in lg.handlers[:]:
            if isinstance(handler, logging.FileHandler) and handler.baseFilename.startswith(str(folder)):
                lg.removeHandler(handler)
                handler.close()


def dry_run_job(cfg: DictConfig, stats: bool = False) -> None:
    """One job of a --dry-run: list its cells (nothing is loaded or written)."""
    from lengthx.core.cells import experiment_skip_reason

    reason = experiment_skip_reason(cfg)
    if reason:
        print(f"not a cell: {reason}")
        return
    name = (cfg.get("experiment_info") or {}).get("name", "-")
    DRY_RUN_CELLS.extend((name, key) for key in print_job_cells(cfg, stats))
    if cfg.task.name != "segmented_ppl":  # paper B's runs name their corpus above
        from lengthx.tasks import data_status

        print(data_status(cfg.task, str(cfg.profile.name), int(cfg.model.l_tr)))


def job_cells(cfg: DictConfig, stats: bool = False, lines: list[str] | None = None) -> list[Any]:
    """One job's cells (paper B: also the training runs they need, appended to ``lines``)."""
    from lengthx.core.cells import planned_cells

    if cfg.task.name == "segmented_ppl":  # paper B: the training runs it needs, then its cells
        from lengthx.core.perplexity import planned_runs

        runs, cells = planned_runs(cfg)
        (lines if lines is not None else []).extend(runs)
        return cells
    return planned_cells(cfg, stats=stats)


def print_job_cells(cfg: DictConfig, stats: bool = False) -> list[str]:
    """Print one job's cells (paper B: first the training runs they need); return their keys."""
    runs: list[str] = []
    cells = job_cells(cfg, stats, runs)
    if runs:
        print("\n".join(runs))
    for cell in cells:
        print(f"cell {cell.key}  ({cell.setting.value} {cell.setting.unit})")
    return [cell.key for cell in cells]


def print_plan(cells: list[tuple[str, str]], overrides: list[str]) -> None:
    """Cells per paper table, beside the number of cells of the published table."""
    from lengthx.report.tables import TABLES
    from lengthx.report.tables.cells import filled_cells, published_cell_count
    from lengthx.report.tables.published import PAPER_DIR

    runs = [tuple(key.split("|")) for _, key in cells]
    print(f"\n{len(set(runs))} distinct cells listed" + (f" ({' '.join(overrides)})" if overrides else ""))
    print(f"cells per table (listed here / in the published table at {PAPER_DIR}):")
    for spec in TABLES.values():
        filled = filled_cells(spec, runs)
        if filled:
            pub = published_cell_count(spec)
            print(f"  {spec.id:16s} {len(filled):4d} / {'?' if pub is None else pub}")


def sweep_jobs(overrides: list[str]) -> tuple[Any, list[list[str]]]:
    """(config, job overrides) of a multirun of ``overrides``, expanded as Hydra's basic sweeper expands it:
    the config's ``hydra.sweeper.params`` (an experiment's sweep), with command-line overrides taking
    precedence. The config is composed from the overrides that are not sweeps."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    register_resolvers()
    parser = OverridesParser.create()
    fixed = [o.input_line for o in parser.parse_overrides(overrides) if not o.is_sweep_override()]
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose(RUN_CONFIG, overrides=fixed, return_hydra_config=True)
    params = {str(k): str(v) for k, v in (cfg.hydra.sweeper.params or {}).items()}
    given = {ov.split("=", 1)[0] for ov in overrides if "=" in ov}
    sweep = [f"{k}={v}" for k, v in params.items() if k not in given] + overrides
    jobs = [job for batch in BasicSweeper.split_arguments(parser.parse_overrides(sweep), None) for job in batch]
    return cfg, jobs


def experiment_jobs(experiment: str, overrides: list[str]) -> tuple[str, list[list[str]]]:
    """(command, job overrides) of ``experiment``'s sweep (:func:`sweep_jobs` of ``experiment=…``)."""
    cfg, jobs = sweep_jobs([f"experiment={experiment}", *overrides])
    return str((cfg.get("experiment_info") or {}).get("command", "run")), jobs
