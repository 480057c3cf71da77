"""``lengthx train``: Hydra entry of paper B's continued pre-training (:mod:`lengthx.segmented.loop`).

The config is ``lengthx/conf/train.yaml``, composed from the same groups as ``lengthx run`` (``model``, the
``kind: training`` entries of ``method``, ``data``, ``profile``), so
``lengthx train model=pythia-160m method=chunk-0.25 l_e_factor=4`` and ``model.path=DIR`` work as in
``lengthx run``. Every method but ``ootb`` starts from the model's OOTB run (paper B §4.3): train it first with
``lengthx train model=… method=ootb`` (``lengthx run task=segmented_ppl task.run=…`` does so by itself).
Data-parallel:

    accelerate launch --num_processes 4 -m lengthx.cli.train profile=paper model=gpt2 method=chunk-0.25
    accelerate launch --multi_gpu --num_processes 2 -m lengthx.cli.train model.path=DIR train.max_steps=4

The second line is the CPU-only recipe: with no GPU visible, ``--multi_gpu`` starts N gloo processes
(DistributedType.MULTI_CPU). accelerate 1.x's ``--cpu --num_processes N`` runs a single process unless mpirun
is set up (``--mpirun_hostfile``). ``torchrun --nproc_per_node N -m lengthx.cli.train …`` works as well.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from lengthx.cli.common import reported
from lengthx.cli.launchers import check_launcher, launcher_target
from lengthx.config import (
    CONF_DIR,
    RUNS_ENV,
    TRAIN_CONFIG,
    check_output_env,
    check_overrides,
    choices,
    register_resolvers,
)
from lengthx.errors import UsageError
from lengthx.models.minis import apply_profile, compose_train


def compose_train_config(overrides: list[str] | None = None) -> Any:
    """The training config for ``overrides`` after the same checks as the command line (tests, scripts)."""
    overrides = list(overrides or [])
    check_overrides(overrides, command="train")
    return compose_train(overrides)


def _train(cfg: Any, worker: bool = False) -> None:
    from lengthx.errors import JobsFailed
    from lengthx.segmented.loop import main_summary, train

    # configuration mistakes (unknown family, bad α, missing files, a foreign output_dir, a checkpoint that is
    # not safetensors and JSON): one paragraph, exit 2, and Hydra's record of the refused run removed; in a
    # launcher's worker, the same line for the waiting command (lengthx.cli.common.reported)
    try:
        with reported("lengthx train", worker=worker):
            result = train(apply_profile(cfg))
    except (SystemExit, JobsFailed) as stop:
        if isinstance(stop, JobsFailed) or stop.code == 2:
            drop_record_of_refused_run()
        raise
    if result.is_main:
        print(main_summary(result))


def drop_record_of_refused_run() -> None:
    """Remove the output folder Hydra made for this job when it holds nothing but Hydra's own record (its
    ``.hydra`` folder and ``train.log``): a refused run leaves nothing behind. Empty parents go with it, up to the
    runs place's ``.hydra`` folder."""
    import shutil
    from pathlib import Path

    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    out = Path(HydraConfig.get().runtime.output_dir)
    if not out.is_dir() or {p.name for p in out.iterdir()} - {".hydra", "train.log"}:
        return
    shutil.rmtree(out, ignore_errors=True)
    for parent in out.parents:
        if not parent.is_dir() or any(parent.iterdir()):
            break
        parent.rmdir()
        if parent.name == ".hydra":
            if not any(parent.parent.iterdir()):
                parent.parent.rmdir()
            break


def train_main(argv: list[str]) -> None:
    """``lengthx train [overrides]``: run (or resume) one training run per Hydra job (``-m`` sweeps)."""
    import hydra

    if argv and argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        for group in ("method", "data", "profile", "model"):
            print(f"{group + ':':9} " + ", ".join(choices(group, "train")))
        return
    try:
        check_overrides(argv, command="train")
        check_launcher(argv)
        check_output_env(RUNS_ENV)  # before Hydra: it writes its record under $LENGTHX_RUNS
    except UsageError as err:
        print(f"lengthx: {err}", file=sys.stderr)
        sys.exit(2)
    register_resolvers()
    watched = launcher_target(argv)  # submitit's launchers, with the job ids, Ctrl-C and failures
    sys.argv = ["lengthx train", *argv, *([watched] if watched else [])]
    parent = os.getpid()
    os.environ["HYDRA_FULL_ERROR"] = "1"  # a failure reaches the one-line report below, not Hydra's traceback

    def job(cfg: Any) -> None:
        _train(cfg, worker=os.getpid() != parent)  # a launcher's worker reports its failure to this process

    with reported("lengthx train"):
        hydra.main(version_base=None, config_path=str(CONF_DIR), config_name=TRAIN_CONFIG)(job)()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    train_main(sys.argv[1:])
