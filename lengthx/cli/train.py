"""``lengthx train``: Hydra entry of paper B's continued pre-training (:mod:`lengthx.segmented.loop`).

The training configs live in ``conf/train/`` (``config.yaml``, groups ``method/`` and ``profile/``); models
are the shared ``conf/model/`` entries, registered into Hydra's ConfigStore as the ``model`` group, so
``lengthx train model=pythia-160m method=chunk-0.25 l_e_factor=4`` and ``model.path=DIR`` work as in
``lengthx run``. Data-parallel:

    accelerate launch --num_processes 4 -m lengthx.cli.train profile=paper model=gpt2 method=chunk-0.25
    accelerate launch --multi_gpu --num_processes 2 -m lengthx.cli.train model.path=DIR train.max_steps=4

The second line is the CPU-only recipe: with no GPU visible, ``--multi_gpu`` starts N gloo processes
(DistributedType.MULTI_CPU). accelerate 1.x's ``--cpu --num_processes N`` runs a single process unless mpirun
is set up (``--mpirun_hostfile``). ``torchrun --nproc_per_node N -m lengthx.cli.train …`` works as well.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lengthx.cli.common import reported
from lengthx.config import CONF_DIR, check_overrides, choices, register_resolvers
from lengthx.errors import UsageError
from lengthx.models.minis import apply_profile

TRAIN_CONF_DIR = CONF_DIR / "train"


TRAIN_GROUPS = {
    "model": CONF_DIR / "model",
    "method": TRAIN_CONF_DIR / "method",
    "profile": TRAIN_CONF_DIR / "profile",
}


TrainUsageError = UsageError  # a user mistake in ``lengthx train`` arguments, reported without a traceback


def _choices(group: str) -> list[str]:
    return choices(group, TRAIN_GROUPS)


def check_train_overrides(argv: list[str]) -> None:
    """Fail fast on unknown model / method / profile names, listing the valid ones."""
    check_overrides(argv, TRAIN_GROUPS, command="train")


@contextmanager
def model_configs() -> Iterator[None]:
    """``conf/model/*.yaml`` as the ``model`` group of the training config, for the duration of the block.

    They are put into Hydra's (process-global) ConfigStore and taken out again afterwards, so a later
    ``lengthx run`` composition in the same process sees only ``conf/model`` (no schema-matching clash).
    """
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    cs = ConfigStore.instance()
    had = "model" in cs.repo
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        cs.store(group="model", name=path.stem, node=OmegaConf.load(path))
    try:
        yield
    finally:
        if not had:
            cs.repo.pop("model", None)


def compose_train_config(overrides: list[str] | None = None) -> Any:
    """The resolved-on-access training config for ``overrides`` (for tests and programmatic runs)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = list(overrides or [])
    check_train_overrides(overrides)
    register_resolvers()
    GlobalHydra.instance().clear()
    with model_configs(), initialize_config_dir(config_dir=str(TRAIN_CONF_DIR), version_base=None):
        return apply_profile(compose(config_name="config", overrides=overrides))


def _train(cfg: Any) -> None:
    from lengthx.segmented.loop import main_summary, train

    # configuration mistakes (unknown family, bad α, missing files, a foreign output_dir, a checkpoint that is
    # not safetensors and JSON): one paragraph, exit 2
    with reported("lengthx train"):
        result = train(apply_profile(cfg))
    if result.is_main:
        print(main_summary(result))


def train_main(argv: list[str]) -> None:
    """``lengthx train [overrides]``: run (or resume) one training run per Hydra job (``-m`` sweeps)."""
    import hydra

    if argv and argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        print("methods:  " + ", ".join(_choices("method")))
        print("profiles: " + ", ".join(_choices("profile")))
        print("models:   " + ", ".join(_choices("model")))
        return
    try:
        check_train_overrides(argv)
    except TrainUsageError as err:
        print(f"lengthx: {err}", file=sys.stderr)
        sys.exit(2)
    register_resolvers()
    sys.argv = ["lengthx train", *argv]
    with model_configs():
        hydra.main(version_base=None, config_path=str(TRAIN_CONF_DIR), config_name="config")(_train)()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    train_main(sys.argv[1:])
