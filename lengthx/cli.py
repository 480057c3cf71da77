"""The ``lengthx`` command: run | calibrate | train | stats | tables | figures | ls (docs/design.md §1, §11).

``run`` and ``calibrate`` take Hydra overrides (``lengthx run task=passkey method=pmax``, ``-m`` sweeps,
launchers); unknown config names fail before anything is loaded, with the valid names listed, and every job's
config is validated (:mod:`lengthx.validate`) before Hydra starts. A mistake the user can fix is one line on
stderr and exit status 2, never a traceback (``--debug`` or ``LENGTHX_DEBUG=1`` shows it); Ctrl-C during
``run`` says how much was kept (docs/results.md).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lengthx.config import CONF_DIR, register_resolvers
from lengthx.errors import UserError, debug_enabled, one_line

GROUPS = ("model", "method", "task", "profile", "experiment")
USAGE = """usage: lengthx <command> [args]

commands:
  run [overrides]        run cells, e.g. lengthx run task=passkey method=pmax  (-m to sweep)
  calibrate [overrides]  Algorithm 1: print and cache τ per setting, e.g. lengthx calibrate method=pmax
  train [overrides]      paper B continued pre-training, e.g. lengthx train model=gpt2 method=chunk-0.25 l_e_factor=4
  stats [overrides]      dispersal statistics at τ=1 per setting and at L_tr (paper A Tables 1, 7; Figures 1-2)
  plan [profile=paper] [experiment=aa_table4 …]   list every cell of the paper-A experiments, with counts
                         per table beside the published tables' (a dry run of all of conf/experiment/aa_*)
  tables [--format latex|markdown|both] [--results-dir DIR] [--out DIR] [--compare-paper]
  figures [--results-dir DIR] [--out DIR]   Figures 1, 2/5 and the temperature curves (PNG + PDF)
  ls                     list models, methods, tasks, profiles and experiments

--debug (or LENGTHX_DEBUG=1) shows the Python traceback of an error instead of its one-line message.

run and stats take --dry-run: list the cells (model|method|task|setting) a run or sweep would compute and
how many cells of each paper table they fill, without loading a model or writing results, e.g.
  lengthx run -m experiment=aa_table4 profile=paper --dry-run
"""


class UsageError(UserError):
    """A user mistake reported as one paragraph, without a traceback."""


USER_ERRORS = (UserError, ValueError, FileNotFoundError, FileExistsError)  # exit status 2


@contextmanager
def reported(prog: str = "lengthx") -> Iterator[None]:
    """Errors as one line on stderr: exit 2 for a mistake the user can fix (:data:`USER_ERRORS`), 1 for anything
    else, 130 for Ctrl-C. With ``--debug`` / ``LENGTHX_DEBUG=1`` the error propagates, traceback and all."""
    try:
        yield
    except KeyboardInterrupt:
        if debug_enabled():
            raise
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    except USER_ERRORS as err:
        if debug_enabled():
            raise
        print(f"{prog}: {one_line(str(err))}", file=sys.stderr)
        sys.exit(2)
    except Exception as err:
        if debug_enabled():
            raise
        print(f"{prog}: unexpected {type(err).__name__}: {one_line(str(err))} (rerun with --debug or LENGTHX_DEBUG=1 "
              "for the traceback)", file=sys.stderr)
        sys.exit(1)


def choices(group: str, groups: dict[str, Path] | None = None) -> list[str]:
    """Config names of ``group`` (the YAML files of its directory)."""
    folder = (groups or {})[group] if groups else CONF_DIR / group
    return sorted(p.stem for p in folder.glob("*.yaml"))


def check_overrides(overrides: list[str], groups: dict[str, Path] | None = None, command: str = "run") -> None:
    """Fail fast on unknown config-group choices (``task=pasky``), listing the valid names.

    ``groups`` maps group names to their config directories (default: ``conf/<group>`` for :data:`GROUPS`).
    """
    names = groups if groups is not None else dict.fromkeys(GROUPS)
    for ov in overrides:
        if "=" not in ov or ov.startswith("-"):
            continue
        key, value = ov.split("=", 1)
        key = key.lstrip("+~").removeprefix("override ")
        if key not in names:
            continue
        valid = choices(key, groups)
        for v in value.split(","):
            if v and v not in valid:
                raise UsageError(f"unknown {key} '{v}' for lengthx {command}. Valid {key} names: "
                                 f"{', '.join(valid)}. See 'lengthx ls' for one line on each.")




# Hydra flags after which the command line is not a run to validate (Hydra prints or inspects something)
HYDRA_INSPECT_FLAGS = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
                       "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun")


def validate_jobs(argv: list[str], environment: bool = True) -> None:
    """Validate the config of every job ``argv`` starts (each job of a ``-m`` sweep) before Hydra starts one:
    values (:func:`lengthx.validate.validate_run_config`) and, with ``environment``, ``results_dir`` and
    ``model.path``. Raises the first problem as one line naming the key (or file) and the fix."""
    from hydra.errors import HydraException

    from lengthx.models.minis import apply_profile
    from lengthx.validate import compose_checked, composition_error, validate_run_config

    if any(a in HYDRA_INSPECT_FLAGS for a in argv):
        return
    overrides = [a for a in argv if not a.startswith("-") and not a.lstrip("+~").startswith("hydra")]
    jobs = [overrides]
    if "-m" in argv or "--multirun" in argv:
        try:
            jobs = sweep_jobs(overrides)[1]
        except HydraException as err:
            raise composition_error(err, overrides) from None
    checked: set[str] = set()
    for job in jobs:
        validate_run_config(apply_profile(compose_checked(job)), environment, checked)


def _hydra_entry(task_fn, argv: list[str], prog: str, environment: bool = True) -> None:
    """Run ``task_fn(cfg)`` under Hydra with ``argv`` as overrides (so -m and launchers work), once every job's
    config is validated (``environment``: its results directory and model directory too)."""
    import hydra

    from lengthx.models.minis import apply_profile

    check_overrides(argv)
    register_resolvers()
    validate_jobs(argv, environment)
    sys.argv = [prog, *argv]
    if debug_enabled():
        os.environ["HYDRA_FULL_ERROR"] = "1"

    def job(cfg) -> None:
        with reported(prog):
            apply_profile(cfg)  # profile=mini: a paper model runs as its shipped mini
            task_fn(cfg)

    hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")(job)()


DRY_RUN_CELLS: list[tuple[str, str]] = []  # (experiment, cell key) listed by the jobs of a --dry-run


def _hydra_command(task_fn, argv: list[str], prog: str, dry_run_fn=None) -> None:
    """``_hydra_entry``, or with ``--dry-run`` in ``argv``: ``dry_run_fn`` in every job of the (multi)run.

    A dry run lists cells and loads no model; Hydra's output goes to a temporary directory that is removed
    afterwards, and the cells per paper table are printed at the end."""
    import shutil
    import tempfile

    if "--dry-run" not in argv:
        _hydra_entry(task_fn, argv, prog)
        return
    if dry_run_fn is None:
        raise UsageError(f"{prog} has no --dry-run")
    argv = [a for a in argv if a != "--dry-run"]
    if any(a.startswith("hydra/launcher=") for a in argv):
        raise UsageError("--dry-run collects the cells in this process; drop hydra/launcher=… for it")
    tmp = tempfile.mkdtemp(prefix="lengthx-dry-run-")
    DRY_RUN_CELLS.clear()
    try:
        _hydra_entry(dry_run_fn, [*argv, f"hydra.run.dir={tmp}/run", f"hydra.sweep.dir={tmp}/sweep",
                                  "hydra.output_subdir=null"], prog, environment=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _print_plan(DRY_RUN_CELLS, argv)


def _dry_run_job(cfg, stats: bool = False) -> None:
    """One job of a --dry-run: list its cells (nothing is loaded or written)."""
    from lengthx.runner import experiment_skip_reason, planned_cells

    reason = experiment_skip_reason(cfg)
    if reason:
        print(f"not a cell: {reason}")
        return
    cells = planned_cells(cfg, stats=stats)
    name = (cfg.get("experiment_info") or {}).get("name", "-")
    for cell in cells:
        print(f"cell {cell.key}  ({cell.setting.value} {cell.setting.unit})")
        DRY_RUN_CELLS.append((name, cell.key))


def _print_plan(cells: list[tuple[str, str]], overrides: list[str]) -> None:
    """Cells per paper table, beside the number of cells of the published table."""
    from lengthx.tables import TABLES
    from lengthx.tables.cells import filled_cells, published_cell_count
    from lengthx.tables.render import PAPER_DIR

    runs = [tuple(key.split("|")) for _, key in cells]
    print(f"\n{len(set(runs))} distinct cells listed ({' '.join(overrides)})")
    print(f"cells per table (listed here / in the published table at {PAPER_DIR}):")
    for spec in TABLES.values():
        filled = filled_cells(spec, runs)
        if filled:
            pub = published_cell_count(spec, PAPER_DIR)
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
        cfg = compose("config", overrides=fixed, return_hydra_config=True)
    params = {str(k): str(v) for k, v in (cfg.hydra.sweeper.params or {}).items()}
    given = {ov.split("=", 1)[0] for ov in overrides if "=" in ov}
    sweep = [f"{k}={v}" for k, v in params.items() if k not in given] + overrides
    jobs = [job for batch in BasicSweeper.split_arguments(parser.parse_overrides(sweep), None) for job in batch]
    return cfg, jobs


def experiment_jobs(experiment: str, overrides: list[str]) -> tuple[str, list[list[str]]]:
    """(command, job overrides) of ``experiment``'s sweep (:func:`sweep_jobs` of ``experiment=…``)."""
    cfg, jobs = sweep_jobs([f"experiment={experiment}", *overrides])
    return str((cfg.get("experiment_info") or {}).get("command", "run")), jobs


def _plan(argv: list[str]) -> None:
    """``lengthx plan``: every cell of every paper-A experiment (or those named), with counts per table."""
    from hydra import compose, initialize_config_dir

    from lengthx.models.minis import apply_profile
    from lengthx.runner import experiment_skip_reason, planned_cells

    check_overrides(argv, command="plan")
    experiments = [v for a in argv if a.startswith("experiment=") for v in a.split("=", 1)[1].split(",")]
    rest = [a for a in argv if not a.startswith("experiment=")]
    experiments = experiments or [e for e in choices("experiment") if e.startswith("aa_")]
    cells: list[tuple[str, str]] = []
    for experiment in experiments:
        command, jobs = experiment_jobs(experiment, rest)
        print(f"== experiment {experiment}: lengthx {command} -m experiment={experiment} {' '.join(rest)} "
              f"({len(jobs)} jobs)")
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            for job in jobs:
                cfg = apply_profile(compose("config", overrides=job))
                if experiment_skip_reason(cfg):
                    continue
                for cell in planned_cells(cfg, stats=command == "stats"):
                    print(f"cell {cell.key}  ({cell.setting.value} {cell.setting.unit})")
                    cells.append((experiment, cell.key))
    _print_plan(cells, argv)


def _run(cfg) -> None:
    from lengthx.runner import Runner, experiment_skip_reason

    reason = experiment_skip_reason(cfg)
    if reason:
        print(f"skipped: {reason}")
        return
    if cfg.task.name == "segmented_ppl":  # paper B: perplexity of (continued-)pre-trained decoders
        from lengthx.tasks.segmented_ppl import run_task

        summary = run_task(cfg)
    else:
        runner = Runner(cfg)
        try:
            summary = runner.run()
        except KeyboardInterrupt:
            if debug_enabled():
                raise
            kept, total = runner.kept_examples()
            print(f"interrupted; rerun the same command to resume: {kept} of {total} examples kept", file=sys.stderr)
            sys.exit(130)
    for s in summary:
        print(f"{s['cell']:60s} {s['status']:6s} {s.get('value', '')}")


def _calibrate(cfg) -> None:
    """``lengthx calibrate``: Algorithm 1 per setting, printed with the statistics that chose τ."""
    import json

    from lengthx.runner import Cell, Runner, method_id

    if cfg.method.name not in ("pmax", "entropy"):
        print(f"lengthx calibrate needs method=pmax or method=entropy, got method={cfg.method.name}",
              file=sys.stderr)
        sys.exit(2)
    runner = Runner(cfg)
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


def _stats(cfg) -> None:
    from lengthx.analysis import run_statistics
    from lengthx.runner import Runner

    summary = run_statistics(Runner(cfg))
    for s in summary:
        print(f"{s['cell']:60s} {s['status']:6s} P_max={s.get('value', '')}")


def _ls() -> None:
    from omegaconf import OmegaConf

    register_resolvers()
    for group in GROUPS:
        print(f"{group}s:" if group != "profile" else "profiles:")
        for name in choices(group):
            raw = OmegaConf.load(CONF_DIR / group / f"{name}.yaml")
            desc = raw.get("description") or _first_comment(CONF_DIR / group / f"{name}.yaml")
            extra = f" [{raw.get('family')}, L_tr={raw.get('l_tr')}, {raw.get('hub_id') or 'local'}]" \
                if group == "model" else ""
            print(f"  {name:20s} {desc}{extra}")


def _first_comment(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("# ").strip()
    return ""


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:
        argv = [a for a in argv if a != "--debug"]
        os.environ["LENGTHX_DEBUG"] = "1"
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    cmd, rest = argv[0], argv[1:]
    with reported():
        if cmd == "run":
            _hydra_command(_run, rest, "lengthx run", dry_run_fn=_dry_run_job)
        elif cmd == "plan":
            _plan(rest)
        elif cmd == "calibrate":
            _hydra_entry(_calibrate, rest, "lengthx calibrate")
        elif cmd == "train":  # paper B; validated against conf/train by train_main itself
            from lengthx.train_cli import train_main

            train_main(rest)
        elif cmd == "stats":
            _hydra_command(_stats, rest, "lengthx stats", dry_run_fn=lambda cfg: _dry_run_job(cfg, stats=True))
        elif cmd == "tables":
            from lengthx.tables import tables_main

            tables_main(rest)
        elif cmd == "figures":
            from lengthx.figures import figures_main

            figures_main(rest)
        elif cmd == "ls":
            _ls()
        else:
            raise UsageError(f"unknown command '{cmd}'. Valid commands: run, calibrate, train, stats, plan, tables, "
                             "figures, ls.")


if __name__ == "__main__":
    main()
