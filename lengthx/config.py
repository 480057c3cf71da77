"""Where the Hydra configs live and how a command's config is composed.

One config root, ``lengthx/conf/`` (package data): ``run.yaml`` (``lengthx run`` / ``stats`` / ``calibrate``) and
``train.yaml`` (``lengthx train``) compose the same groups: ``model``, ``method`` (temperature methods for runs,
``kind: training`` ones for training), ``task``, ``data``, ``profile`` and ``experiment``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lengthx.errors import UsageError

PACKAGE_DIR = Path(__file__).resolve().parent
MAX_L_TR = 1_000_000  # the longest training length accepted (model.l_tr, task.l_t, a config's), in tokens


CONF_DIR = Path(os.environ.get("LENGTHX_CONF", PACKAGE_DIR / "conf")).resolve()

RUN_CONFIG, TRAIN_CONFIG = "run", "train"  # the two primary configs of CONF_DIR


def default_results_dir(profile: str = "mini") -> Path:
    """Where ``lengthx run`` writes by default (``results_dir`` in run.yaml): ``$LENGTHX_RESULTS/<profile>``,
    else ``results/local/<profile>`` (git-ignored); the committed results are ``LENGTHX_RESULTS=results``. A
    relative place is taken from the checkout's root when the command runs inside the checkout
    (:func:`results_place`)."""
    return Path(results_place(os.environ.get("LENGTHX_RESULTS") or "results/local")) / profile


def checkout_root() -> Path | None:
    """The lengthx checkout this package runs from (an editable install in a clone), or None (an installed
    package)."""
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() and (root / "lengthx" / "conf").is_dir() else None


def results_place(value: str) -> str:
    """A default results place as every command resolves it: a relative one from the checkout's root when the
    working directory lies inside the checkout (so a command run from ``docs/`` writes where one run from the root
    does), else from the working directory."""
    root = checkout_root()
    if Path(value).is_absolute() or root is None:
        return value
    try:
        Path.cwd().resolve().relative_to(root)
    except ValueError:
        return value
    return str(root / value)


# the environment variables that move where commands write: lengthx run/stats/calibrate, lengthx train
RESULTS_ENV, RUNS_ENV = "LENGTHX_RESULTS", "LENGTHX_RUNS"


def output_place_problem(value: str) -> str | None:
    """Why ``value`` cannot be a directory lengthx writes into, or None: empty (it would be the current
    directory, and Hydra's record ``/.hydra``), the file-system root, or inside the lengthx package."""
    if not str(value).strip():
        return "is empty"
    where = Path(value).expanduser().resolve()
    if where == Path(where.anchor):
        return "is the file-system root"
    if where == PACKAGE_DIR or where.is_relative_to(PACKAGE_DIR):
        return f"lies inside the lengthx package ({PACKAGE_DIR})"
    return None


def check_output_place(value: str, key: str, fix: str) -> None:
    """Raise :class:`UsageError` naming ``key`` and ``fix`` when lengthx must not write into ``value``
    (:func:`output_place_problem`): docs/results.md, "No write leaves the results directory"."""
    problem = output_place_problem(str(value))
    if problem is not None:
        raise UsageError(f"{key}={value!s} {problem}; nothing was written. Fix: {fix}")


def check_output_env(*names: str) -> None:
    """Each of ``names`` (:data:`RESULTS_ENV`, :data:`RUNS_ENV`), when set, names a directory lengthx may write
    into: set but empty, ``/`` or inside the package is a :class:`UsageError`."""
    defaults = {RESULTS_ENV: "results/local", RUNS_ENV: "runs"}
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            check_output_place(value, name, f"unset {name} (the default is {defaults.get(name, 'used')}) or set it "
                               "to a directory, e.g. export " + f"{name}={defaults.get(name, 'DIR')}")


def results_dir_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be a results directory to read (None when it can): it does not exist (a typo), or it
    is a file (``results.csv`` itself, rather than the directory holding it)."""
    where = Path(path)
    if where.is_file():
        hint = " (results.csv itself)" if where.name == "results.csv" else ""
        return (f"{where} is a file{hint}, not a results directory. Fix: pass the directory that holds results.csv"
                f"{f', e.g. {where.parent}' if hint else ''}")
    if not where.is_dir():
        return (f"{where} does not exist: no results directory there. Fix: check the path (`lengthx run` writes "
                f"{default_results_dir()} unless results_dir= or LENGTHX_RESULTS says otherwise)")
    return None


def register_resolvers() -> None:
    """``${lengthx_pkg:checkpoints/mini-t5}``: a path inside the installed package (the shipped minis, the
    corpora of ``lengthx/corpora/``); ``${lengthx_repo:…}``: a path in the checkout the package runs from
    (repository-only data)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("lengthx_pkg"):
        OmegaConf.register_new_resolver("lengthx_pkg", lambda rel: str(PACKAGE_DIR / rel))
    if not OmegaConf.has_resolver("lengthx_repo"):
        OmegaConf.register_new_resolver("lengthx_repo", lambda rel: str(PACKAGE_DIR.parent / rel))
    if not OmegaConf.has_resolver("lengthx_results"):
        OmegaConf.register_new_resolver("lengthx_results", results_place)


def compose(overrides: list[str], conf_dir: Path = CONF_DIR, config_name: str = RUN_CONFIG) -> Any:
    """The config ``lengthx run <overrides>`` composes (``config_name="train"``: ``lengthx train``'s), before
    ``profile=mini`` maps models onto minis."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


GROUPS = ("model", "method", "task", "data", "profile", "experiment")

# the groups each command composes; ``method`` entries are split by their ``kind`` (see :func:`choices`)
COMMAND_GROUPS = {"run": GROUPS, "train": ("model", "method", "data", "profile")}


def _kind(path: Path) -> str:
    from omegaconf import OmegaConf

    return str(OmegaConf.load(path).get("kind") or "temperature")


def choices(group: str, command: str | None = None) -> list[str]:
    """Config names of ``group`` (the YAML files of its directory); with ``command``, only the methods it runs:
    ``kind: training`` methods for ``train``, the others (temperature methods) for ``run``."""
    paths = sorted((CONF_DIR / group).glob("*.yaml"))
    if group == "method" and command is not None:
        wanted = "training" if command == "train" else "temperature"
        paths = [p for p in paths if _kind(p) == wanted]
    return [p.stem for p in paths]


# the --flags the commands that take overrides accept: lengthx's own and Hydra's
KNOWN_FLAGS = ("--dry-run", "--debug", "--multirun", "--help", "--hydra-help", "--version", "--cfg", "--resolve",
               "--package", "--run", "--info", "--shell-completion", "--config-path", "--config-name",
               "--config-dir", "--experimental-rerun")


def check_flags(argv: list[str], command: str = "run") -> None:
    """A ``--name`` these commands do not know (``lengthx run --task passkey``) is a :class:`UsageError` with the
    ``key=value`` to write instead."""
    for k, arg in enumerate(argv):
        if not arg.startswith("--") or arg.split("=", 1)[0] in KNOWN_FLAGS:
            continue
        name, _, value = arg[2:].partition("=")
        following = argv[k + 1] if k + 1 < len(argv) else ""
        if not value and following and "=" not in following and not following.startswith("-"):
            value = following
        raise UsageError(f"{arg}: lengthx {command} takes its settings as key=value, not --flags. Fix: write "
                         f"{name.replace('-', '_')}={value or 'VALUE'} (lengthx {command} --help lists the keys)")


def check_overrides(overrides: list[str], command: str = "run") -> None:
    """Fail fast on unknown config-group choices (``task=pasky``, a training method in ``lengthx run``),
    listing the valid names."""
    check_flags(overrides, command)
    names = COMMAND_GROUPS["train" if command == "train" else "run"]
    for ov in overrides:
        if "=" not in ov or ov.startswith("-"):
            continue
        key, value = ov.split("=", 1)
        key = key.lstrip("+~").removeprefix("override ")
        if key not in names:
            continue
        valid = choices(key, command)
        for v in value.split(","):
            if v and v not in valid:
                hint = ""
                if key == "method" and v in choices("method"):
                    other = "run" if command == "train" else "train"
                    hint = f" ({v} is a method of lengthx {other})"
                raise UsageError(f"unknown {key} '{v}' for lengthx {command}{hint}. Valid {key} names: "
                                 f"{', '.join(valid)}. See 'lengthx ls' for one line on each.")


# where this checkout (or, installed, site-packages) lies: a path below it enters a hash by its place in it
CHECKOUT_DIR = PACKAGE_DIR.parent

# the shipped corpora became package data (lengthx/corpora/, so that a wheel has them); they enter a hash by the
# place they had in the checkout before, corpora/, so runs and cells made from them keep their hashes
SHIPPED_CORPORA, FORMER_CORPORA = "lengthx/corpora/", "corpora/"


def portable(value: Any) -> Any:
    """``value`` with every string that is a path below :data:`CHECKOUT_DIR` written relative to it
    (``<checkout>/lengthx/…``), in lists and dicts too: data shipped with the repository or the package enters
    a hash the same from every clone. Other paths stay as they are."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [portable(v) for v in value]
    root = f"{CHECKOUT_DIR}/"
    if not (isinstance(value, str) and value.startswith(root)):
        return value
    rel = value[len(root):]
    if rel.startswith(SHIPPED_CORPORA):
        rel = FORMER_CORPORA + rel[len(SHIPPED_CORPORA):]
    return f"<checkout>/{rel}"


def is_number(text: str) -> bool:
    """Whether ``text`` reads as a number (``float``), e.g. a τ given as text or a table cell."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def examples_per_setting(cfg: Any) -> int | None:
    """A run's examples per setting: ``task.num_examples``, else the profile's count, else the paper's; ``None``
    when none is set."""
    for n in (cfg.task.get("num_examples"), cfg.profile.get("num_examples"), cfg.task.get("paper_num_examples")):
        if n is not None:
            return int(n)
    return None
