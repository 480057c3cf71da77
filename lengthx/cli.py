"""The ``lengthx`` command: run | calibrate | train | stats | tables | figures | ls (DESIGN §1, §11).

``run`` and ``calibrate`` take Hydra overrides (``lengthx run task=passkey method=pmax``, ``-m`` sweeps,
launchers); unknown config names fail before anything is loaded, with the valid names listed.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CONF_DIR = Path(os.environ.get("LENGTHX_CONF", PACKAGE_DIR.parent / "conf")).resolve()
GROUPS = ("model", "method", "task", "profile", "experiment")
USAGE = """usage: lengthx <command> [args]

commands:
  run [overrides]        run cells, e.g. lengthx run task=passkey method=pmax  (-m to sweep)
  calibrate [overrides]  Algorithm 1: print and cache τ per setting, e.g. lengthx calibrate method=pmax
  train [overrides]      paper B continued pre-training, e.g. lengthx train model=gpt2 method=chunk-0.25 l_e_factor=4
  stats [overrides]      dispersal statistics at τ=1 per setting and at L_tr (paper A Tables 1, 7; Figures 1-2)
  tables [--format latex|markdown|both] [--results-dir DIR] [--out DIR] [--compare-paper]
  figures [--results-dir DIR] [--out DIR]   Figures 1, 2/5 and the temperature curves (PNG + PDF)
  ls                     list models, methods, tasks, profiles and experiments
"""


class UsageError(Exception):
    """A user mistake reported as one paragraph, without a traceback."""


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


def _register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("lengthx_pkg"):
        OmegaConf.register_new_resolver("lengthx_pkg", lambda rel: str(PACKAGE_DIR / rel))


def _hydra_entry(task_fn, argv: list[str], prog: str) -> None:
    """Run ``task_fn(cfg)`` under Hydra with ``argv`` as overrides (so -m and launchers work)."""
    import hydra

    check_overrides(argv)
    _register_resolvers()
    sys.argv = [prog, *argv]
    hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")(task_fn)()


def _run(cfg) -> None:
    from lengthx.models.loading import ModelNotAvailable
    from lengthx.runner import Runner

    try:
        if cfg.task.name == "segmented_ppl":  # paper B: perplexity of (continued-)pre-trained decoders
            from lengthx.tasks.segmented_ppl import run_task

            summary = run_task(cfg)
        else:
            summary = Runner(cfg).run()
    except (ModelNotAvailable, ValueError) as err:
        print(f"lengthx: {err}", file=sys.stderr)
        sys.exit(2)
    for s in summary:
        print(f"{s['cell']:60s} {s['status']:6s} {s.get('value', '')}")


def _calibrate(cfg) -> None:
    """``lengthx calibrate``: Algorithm 1 per setting, printed with the statistics that chose τ."""
    import json

    from lengthx.models.loading import ModelNotAvailable
    from lengthx.runner import Cell, Runner, method_id

    if cfg.method.name not in ("pmax", "entropy"):
        print(f"lengthx calibrate needs method=pmax or method=entropy, got method={cfg.method.name}",
              file=sys.stderr)
        sys.exit(2)
    try:
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
    except ModelNotAvailable as err:
        print(f"lengthx: {err}", file=sys.stderr)
        sys.exit(2)


def _stats(cfg) -> None:
    from lengthx.analysis import run_statistics
    from lengthx.models.loading import ModelNotAvailable
    from lengthx.runner import Runner

    try:
        summary = run_statistics(Runner(cfg))
    except ModelNotAvailable as err:
        print(f"lengthx: {err}", file=sys.stderr)
        sys.exit(2)
    for s in summary:
        print(f"{s['cell']:60s} {s['status']:6s} P_max={s.get('value', '')}")


def _ls() -> None:
    from omegaconf import OmegaConf

    _register_resolvers()
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
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "run":
            _hydra_entry(_run, rest, "lengthx run")
        elif cmd == "calibrate":
            _hydra_entry(_calibrate, rest, "lengthx calibrate")
        elif cmd == "train":  # paper B; validated against conf/train by train_main itself
            from lengthx.train_cli import train_main

            train_main(rest)
        elif cmd == "stats":
            _hydra_entry(_stats, rest, "lengthx stats")
        elif cmd == "tables":
            from lengthx.tables import tables_main

            tables_main(rest)
        elif cmd == "figures":
            from lengthx.figures import figures_main

            figures_main(rest)
        elif cmd == "ls":
            _ls()
        else:
            raise UsageError(f"unknown command '{cmd}'. Valid commands: run, calibrate, train, stats, tables, figures, ls.")
    except UsageError as err:
        print(f"lengthx: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
