"""The ``lengthx`` command: run | calibrate | train | train-mini | stats | tables | figures | ls (docs/design.md §1,
§11).

``run`` and ``calibrate`` take Hydra overrides (``lengthx run task=passkey method=pmax``, ``-m`` sweeps,
launchers); unknown config names fail before anything is loaded, with the valid names listed, and every job's
config is validated (:mod:`lengthx.cli.validate`) before Hydra starts. A mistake the user can fix is one line on
stderr and exit status 2, never a traceback (``--debug`` or ``LENGTHX_DEBUG=1`` shows it); Ctrl-C (or SIGTERM,
as a cluster scheduler sends) during ``run`` says how much was kept (docs/results.md).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

from lengthx.cli.common import dry_run_job, hydra_command, hydra_entry, reported
from lengthx.cli.run import (
    calibrate_command,
    check_calibrate,
    finished_run,
    plan_command,
    run_command,
    stats_command,
)
from lengthx.config import CONF_DIR, GROUPS, choices, register_resolvers
from lengthx.errors import UsageError, raise_terminated

USAGE = """usage: lengthx <command> [args]

commands:
  run [overrides]        run cells, e.g. lengthx run task=passkey method=pmax  (-m to sweep)
  calibrate [overrides]  Algorithm 1: print and cache τ per setting, e.g. lengthx calibrate method=pmax
  train [overrides]      paper B continued pre-training, e.g. lengthx train model=gpt2 method=chunk-0.25 l_e_factor=4
  train-mini recipe=NAME [KEY=VALUE …]   train a mini stand-in from a recipe (lengthx/conf/mini/), e.g.
                         lengthx train-mini recipe=first_of_k seed=2   (--help lists the recipes)
  stats [overrides]      dispersal statistics at τ=1 per setting and at L_tr (paper A Tables 1, 7; Figures 1-2)
  plan [profile=paper] [experiment=aa_table4 …]   list every cell of the paper-A experiments, with counts
                         per table beside the published tables' (a dry run of all of conf/experiment/aa_*);
                         experiment=sb_table3 … lists paper B's cells and the training runs they need
  tables [--format latex|markdown|both] [--results-dir DIR] [--out DIR] [--compare-paper]
  figures [--results-dir DIR] [--runs-dir DIR] [--out DIR]   paper A's Figures 1, 2/5 and temperature curves,
                         paper B's figures and training curves (metrics.jsonl of each run; PNG + PDF)
  ls                     list models, methods, tasks, profiles and experiments

The same operations from Python, on any supported transformers model: import lengthx (docs/api.md).
lengthx <command> --help: the command's own options (run, stats, calibrate: their keys and every choice).
--debug (or LENGTHX_DEBUG=1) shows the Python traceback of an error instead of its one-line message.

run and stats take --dry-run: list the cells (model|method|task|setting) a run or sweep would compute and
how many cells of each paper table they fill, without loading a model or writing results, e.g.
  lengthx run -m experiment=aa_table4 profile=paper --dry-run
"""


def _ls() -> None:
    from omegaconf import OmegaConf

    register_resolvers()
    for group in GROUPS:
        print(f"{group}:" if group == "data" else f"{group}s:")  # data: paper B's corpora
        for name in choices(group):
            raw = OmegaConf.load(CONF_DIR / group / f"{name}.yaml")
            desc = raw.get("description") or _first_comment(CONF_DIR / group / f"{name}.yaml")
            extra = f" [{raw.get('family')}, L_tr={raw.get('l_tr')}, {raw.get('hub_id') or 'local'}]" \
                if group == "model" and not raw.get("own") else ""
            print(f"  {name:20s} {desc}{extra}")


def _first_comment(path: Path) -> str:
    """The whole leading comment paragraph of a config file (its description), joined into one line: the
    comment lines after an optional ``# @package`` line, up to a blank, indented (a usage example) or non-comment
    line."""
    lines: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# @package") and not lines:
            continue
        text = line[1:] if line.startswith("#") else None
        if text is None or not text.strip() or text.startswith(("  ", "\t")):
            break
        lines.append(text.strip())
    return " ".join(lines)


# per command: (what it does, its own keys); the config groups and the keys all three share follow
COMMAND_HELP = {
    "run": ("run cells (model × method × task × setting) into results_dir: generate, score, one tidy row each",
            ["method.tau=0.7                    the temperature of method=fixed",
             "method.scope=encoder|all          T5: encoder self-attention (paper A) or every attention",
             "method.search=grid|bisect         Algorithm 1's search   method.per_layer=true  one τ per layer",
             "batch_size=N  device=auto|cpu|cuda  dtype=auto|float32|bfloat16"]),
    "stats": ("dispersal statistics at τ=1 per setting and at L_tr (paper A Tables 1, 7; Figures 1-2), from "
              "calibration.num_examples examples each", []),
    "calibrate": ("Algorithm 1 per setting: print and cache τ with the S̄(τ) that chose it",
                  ["method=pmax|entropy                the statistic aligned (P_max or entropy)",
                   "method.search=grid|bisect         the grid of paper A, or bisection on it",
                   "method.per_layer=true             one τ per layer (paper A, Limitations)"]),
}

SHARED_KEYS = [
    "task.settings=[…]  task.unit=…    the sweep axis and its unit (characters, lines, topics, tokens, …)",
    "task.only=[20k,30k]               run only these of the task's settings (their labels)",
    "task.num_examples=N               examples per setting",
    "calibration.num_examples=N        length-L_ex examples for Algorithm 1 / Props 1-2 (never evaluation ones)",
    "results_dir=DIR                   default results/local/<profile> (LENGTHX_RESULTS=results: the committed)",
]

PLAN_HELP = """lengthx plan [profile=paper] [experiment=NAME[,NAME…]] [KEY=VALUE …]: list every cell of the paper-A
experiments (or of those named; paper B's sb_* with the training runs each needs), with the count per table beside
the published table's. Loads no model and writes nothing; -m is implied (experiments are sweeps)."""

GROUP_HELP = {"task": "what to run", "method": "how τ is chosen",
              "model": "the model (profile=mini: its stand-in; hf: your own, model.path=DIR or model.hub_id=ID)",
              "profile": "mini (offline minis) | paper (the papers' lengths)",
              "experiment": "one paper table's sweep, with -m"}


def command_help(cmd: str) -> str:
    """``lengthx run|stats|calibrate --help``: the command's keys and every choice of each config group, read
    from ``lengthx/conf/`` (nothing else is loaded)."""
    import textwrap

    what, own = COMMAND_HELP[cmd]
    dry = cmd in ("run", "stats")
    lines = [f"lengthx {cmd} KEY=VALUE … [-m]{' [--dry-run]' if dry else ''}: {what}", ""]
    for group, desc in GROUP_HELP.items():
        names = choices(group, "run")
        if cmd == "calibrate" and group == "method":
            names = [n for n in names if n in ("pmax", "entropy")]
        text = f"{desc}: {', '.join(names)}"
        lines += textwrap.wrap(text, 110, initial_indent=f"  {group + '=NAME':32s}  ",
                               subsequent_indent=" " * 36)
    lines += ["", *(f"  {k}" for k in own + SHARED_KEYS), "",
              "  -m                                a sweep (Hydra multirun): comma-separated values, experiment=…",
              *(["  --dry-run                         list the cells, load nothing"] if dry else []),
              "  --cfg job                         print the composed config (every key: lengthx/conf/run.yaml)",
              "  --hydra-help                      Hydra's own flags (launchers, sweeper)",
              "", "One line on each name: lengthx ls."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:
        argv = [a for a in argv if a != "--debug"]
        os.environ["LENGTHX_DEBUG"] = "1"
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    signal.signal(signal.SIGTERM, raise_terminated)  # a scheduler's SIGTERM stops a run as Ctrl-C does
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    cmd, rest = argv[0], argv[1:]
    if cmd in COMMAND_HELP and any(a in ("-h", "--help") for a in rest):
        print(command_help(cmd))  # from the config files alone: no Hydra, torch or transformers
        return
    if cmd == "plan" and any(a in ("-h", "--help") for a in rest):
        print(PLAN_HELP)
        return
    with reported():
        if cmd == "run":
            hydra_command(run_command, rest, "lengthx run", dry_run_fn=dry_run_job, finished=finished_run)
        elif cmd == "plan":
            plan_command(rest)
        elif cmd == "calibrate":
            hydra_entry(calibrate_command, rest, "lengthx calibrate", check=check_calibrate)
        elif cmd == "train":  # paper B; train_main validates its own overrides (train.yaml)
            from lengthx.cli.train import train_main

            train_main(rest)
        elif cmd == "train-mini":
            from lengthx.cli.train_mini import train_mini_main

            train_mini_main(rest)
        elif cmd == "stats":
            hydra_command(stats_command, rest, "lengthx stats", dry_run_fn=lambda cfg: dry_run_job(cfg, stats=True))
        elif cmd == "tables":
            from lengthx.cli.tables import tables_main

            tables_main(rest)
        elif cmd == "figures":
            from lengthx.cli.figures import figures_main

            figures_main(rest)
        elif cmd == "ls":
            _ls()
        else:
            raise UsageError(f"unknown command '{cmd}'. Valid commands: run, calibrate, train, train-mini, stats, plan, "
                             "tables, figures, ls.")


if __name__ == "__main__":
    main()
