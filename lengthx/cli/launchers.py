"""Hydra launchers for ``lengthx run`` / ``stats`` / ``calibrate`` / ``train`` sweeps (docs/design.md §12):
``hydra/launcher=local`` (joblib, one machine), ``submitit_local`` (submitit's local executor: each job its own
process, as on a cluster) and ``slurm`` (``lengthx/conf/hydra/launcher/slurm.yaml``: one SLURM array task per
job). A launcher runs the jobs of a ``-m`` sweep; the checks here answer, before Hydra starts, the mistakes that
would otherwise surface inside a job or a traceback: the submitit plugin not installed, a launcher without
``-m`` (Hydra would run the job in this process and say nothing), a SLURM launcher without its partition.
"""

from __future__ import annotations

import importlib.util
import re
import shutil

from lengthx.errors import UsageError

# launchers that need the ``slurm`` extra (hydra-submitit-launcher, which brings submitit)
SUBMITIT_LAUNCHERS = ("slurm", "submitit_local", "submitit_slurm")
# the class of hydra_plugins/lengthx_launchers that runs each (lengthx.cli.submitit_jobs: job ids, Ctrl-C, failures)
WATCHED = {"slurm": "SlurmLauncher", "submitit_slurm": "SlurmLauncher", "submitit_local": "LocalLauncher"}
# keys of hydra/launcher=slurm a user must set, with how to find the value
SLURM_REQUIRED = {"partition": "sinfo -s lists the partitions"}
# Hydra flags that print or inspect the config instead of running it
INSPECT_FLAGS = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i")


def launcher_choice(argv: list[str]) -> str | None:
    """The ``hydra/launcher=NAME`` of a command line, or None."""
    names = [a.split("=", 1)[1] for a in argv if a.lstrip("+").startswith("hydra/launcher=")]
    return names[-1] if names else None


def launcher_target(argv: list[str]) -> str | None:
    """The override that runs a submitit launcher of ``argv`` through :mod:`lengthx.cli.submitit_jobs`, or None."""
    name = launcher_choice(argv)
    if name not in WATCHED or any(a in INSPECT_FLAGS for a in argv):
        return None
    return f"hydra.launcher._target_=hydra_plugins.lengthx_launchers.{WATCHED[name]}"


def submitit_installed() -> bool:
    """Whether Hydra's submitit launcher plugin (the ``slurm`` extra) can be imported."""
    return importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None


def check_launcher(argv: list[str]) -> None:
    """Raise :class:`UsageError` (one line naming the key and the fix) for a launcher that cannot run ``argv``."""
    name = launcher_choice(argv)
    if name is None:
        return
    if name in SUBMITIT_LAUNCHERS and not submitit_installed():
        raise UsageError(f"hydra/launcher={name} needs Hydra's submitit launcher, which is not installed. Fix: "
                         "pip install 'lengthx[slurm]' (hydra-submitit-launcher, which brings submitit)")
    if any(a in INSPECT_FLAGS for a in argv):
        return  # --cfg hydra shows the launcher's settings; nothing is launched
    if "-m" not in argv and "--multirun" not in argv:
        raise UsageError(f"hydra/launcher={name} launches the jobs of a sweep, but without -m the run stays in "
                         "this process. Fix: add -m (lengthx run -m hydra/launcher=… …)")
    if name == "slurm":
        given = {a.split("=", 1)[0].lstrip("+"): a.split("=", 1)[1] for a in argv if "=" in a}
        for key, hint in SLURM_REQUIRED.items():
            if given.get(f"hydra.launcher.{key}", "null") in ("", "null"):
                raise UsageError(f"hydra/launcher=slurm needs hydra.launcher.{key}, which is not set ({hint}). "
                                 f"Fix: add hydra.launcher.{key}=NAME")
        if shutil.which("sbatch") is None:
            raise UsageError("hydra/launcher=slurm submits with sbatch, which is not on PATH (not a SLURM login "
                             "node). Fix: run it on the cluster, or hydra/launcher=submitit_local to run the same "
                             "sweep on this machine")
        check_controller()


def check_hydra_overrides(argv: list[str]) -> None:
    """Raise :class:`UsageError` (one line naming the override and the fix) when Hydra's own overrides (``hydra/…``,
    ``hydra.…``) do not compose: a launcher that does not exist, a value of the wrong type; before any work."""
    own = [a for a in argv if a.lstrip("+~").startswith("hydra") and "=" in a and "," not in a]
    if not own:
        return
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    from lengthx.config import CONF_DIR, RUN_CONFIG, register_resolvers
    register_resolvers()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            compose(RUN_CONFIG, overrides=own, return_hydra_config=True)
    except HydraException as err:
        text = " ".join(str(err).split())
        missing = re.search(r"Could not find '([^']+)' Available options in '[^']+': (.*?) Config search path", text)
        if missing:
            group, name = missing.group(1).rsplit("/", 1)
            raise UsageError(f"{group}={name}: no such choice. Fix: one of {', '.join(missing.group(2).split())}") \
                from None
        cause = " ".join(str(err.__cause__).split()) if err.__cause__ else ""
        raise UsageError(f"{text}{': ' + cause if cause and cause not in text else ''}. Fix: a value of the type "
                         "that key takes (`lengthx run --cfg hydra` shows Hydra's settings)") from None
    finally:
        GlobalHydra.instance().clear()


def check_controller(timeout: float = 30.0) -> None:
    """Raise :class:`UsageError` when no SLURM controller answers ``scontrol ping``: one line naming
    ``SLURM_CONF`` (without it SLURM's clients look the controller up in DNS) and the fix, before any job is
    submitted."""
    import os
    import subprocess

    conf = os.environ.get("SLURM_CONF")
    where = f"SLURM_CONF={conf}" if conf else "SLURM_CONF is not set, so the clients look the controller up in DNS"
    try:
        p = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=timeout)
        said = " ".join((p.stdout + p.stderr).split())
        up = p.returncode == 0 and "UP" in p.stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        said, up = str(err), False
    if not up:
        raise UsageError(f"hydra/launcher=slurm: no SLURM controller answers ({where}; scontrol ping: {said[:200]}). "
                         "Fix: export SLURM_CONF=<your cluster's slurm.conf> on a login node (or start one: "
                         "scripts/slurm/local_cluster.py, docs/cluster.md)")
