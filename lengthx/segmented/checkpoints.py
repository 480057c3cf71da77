"""Exact resume of a paper-B run: checkpoints of the model, optimizer, scheduler, every process's RNG
states and the step counter, written atomically every ``train.save_every`` steps. A checkpoint holds only
safetensors (tensors) and JSON (everything else), so resuming a run directory copied from elsewhere never
unpickles, i.e. never runs, anything in it (docs/results.md).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lengthx.errors import UserError
from lengthx.models.loading import safetensors_problem

log = logging.getLogger("lengthx.train")


def _checkpoints(out: Path) -> list[Path]:
    ck = out / "checkpoints"
    if not ck.is_dir():
        return []
    return sorted(p for p in ck.iterdir() if p.is_dir() and p.name.startswith("step-") and "." not in p.name)


CHECKPOINT_MODEL = "model.safetensors"


CHECKPOINT_OPTIMIZER = "optimizer.safetensors"


CHECKPOINT_STATE = "state.json"


_RNG_FILE = re.compile(r"rng-\d+\.json")


# Accelerate's save_state, as lengthx wrote checkpoints before they held only safetensors and JSON
_LEGACY_FILE = re.compile(r"model\.safetensors|optimizer\.bin|scaler\.pt|custom_checkpoint_[01]\.pkl|"
                          r"random_states_\d+\.pkl")


@dataclass
class TrainerState:
    """The counters a checkpoint restores (registered with Accelerate next to model and optimizer)."""

    step: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.tokens, self.seconds = (
            int(state["step"]),
            int(state["tokens"]),
            float(state["seconds"]),
        )


class CheckpointError(UserError, ValueError):
    """A checkpoint directory that a run does not resume from; the message names the file and the fix."""

    def __init__(self, problem: str, directory: Path):
        super().__init__(f"{problem}; delete {directory} to resume from the checkpoint before it (or to restart)")


@dataclass
class CheckpointParts:
    """What a checkpoint saves and restores: the (prepared) model and optimizer, scheduler and counters."""

    accelerator: Any
    model: Any
    optimizer: Any
    schedule: Any
    state: TrainerState


def _rng_state() -> dict[str, Any]:
    """This process's RNG states (Python, NumPy, torch CPU and CUDA) as JSON values."""
    version, keys, gauss = random.getstate()
    name, np_keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(keys), gauss], "numpy": [name, np_keys.tolist(), pos, has_gauss, cached],
            "torch": torch.get_rng_state().tolist(),
            "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else []}


def _set_rng_state(rng: dict[str, Any]) -> None:
    version, keys, gauss = rng["python"]
    random.setstate((version, tuple(keys), gauss))
    name, np_keys, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((name, np.asarray(np_keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(rng["torch"], dtype=torch.uint8))
    if rng.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in rng["cuda"]])


def save_checkpoint(directory: Path, parts: CheckpointParts) -> None:
    """Write a checkpoint into ``directory``: model weights and optimizer tensors as safetensors; the
    optimizer's other values, scheduler, counters, loss scaler and every process's RNG states as JSON."""
    from safetensors.torch import save_file, save_model

    acc = parts.accelerator
    (directory / f"rng-{acc.process_index}.json").write_text(json.dumps(_rng_state()))
    if not acc.is_main_process:
        return
    save_model(acc.unwrap_model(parts.model), str(directory / CHECKPOINT_MODEL))
    opt = parts.optimizer.state_dict()
    tensors, scalars = {}, {}
    for pid, values in opt["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{pid}/{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[name] = value
    save_file(tensors, str(directory / CHECKPOINT_OPTIMIZER))
    meta = {"trainer": parts.state.state_dict(), "scheduler": parts.schedule.state_dict(),
            "optimizer": {"param_groups": opt["param_groups"], "scalars": scalars},
            "scaler": acc.scaler.state_dict() if acc.scaler is not None else None}
    (directory / CHECKPOINT_STATE).write_text(json.dumps(meta, indent=1))


def load_checkpoint(directory: Path, parts: CheckpointParts) -> None:
    """Restore ``parts`` from a checkpoint of :func:`save_checkpoint`, reading only safetensors and JSON.

    Any other file in the directory is refused with :class:`CheckpointError` before anything is read: a file
    that is neither could run code when loaded (a pickle), and a run directory may come from someone else.
    A checkpoint in Accelerate's ``save_state`` layout (lengthx before this format) is read by
    :func:`_load_legacy_checkpoint`."""
    from safetensors.torch import load_file, load_model

    names = sorted(p.name for p in directory.iterdir())
    if CHECKPOINT_STATE not in names and "optimizer.bin" in names:
        _load_legacy_checkpoint(directory, names, parts)
        return
    allowed = {CHECKPOINT_MODEL, CHECKPOINT_OPTIMIZER, CHECKPOINT_STATE}
    _refuse_foreign(directory, [n for n in names if n not in allowed and not _RNG_FILE.fullmatch(n)])
    acc = parts.accelerator
    rng_file = f"rng-{acc.process_index}.json"
    missing = [n for n in (*sorted(allowed), rng_file) if n not in names]
    if missing:
        raise CheckpointError(f"{directory / missing[0]} is missing (an incomplete checkpoint)", directory)
    try:
        meta = json.loads((directory / CHECKPOINT_STATE).read_text())
        rng = json.loads((directory / rng_file).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"a JSON file of {directory} is damaged ({err})", directory) from None
    for name in (CHECKPOINT_MODEL, CHECKPOINT_OPTIMIZER):  # checked before anything is loaded from them
        problem = safetensors_problem(directory / name)
        if problem is not None:
            raise CheckpointError(f"{directory / name} {problem} (a damaged checkpoint)", directory)
    load_model(acc.unwrap_model(parts.model), str(directory / CHECKPOINT_MODEL), device="cpu")
    opt_state: dict[Any, dict[str, Any]] = {}
    for key, tensor in load_file(str(directory / CHECKPOINT_OPTIMIZER)).items():
        pid, name = key.split("/", 1)
        opt_state.setdefault(int(pid), {})[name] = tensor
    for pid, values in meta["optimizer"]["scalars"].items():
        opt_state.setdefault(int(pid), {}).update(values)
    parts.optimizer.load_state_dict({"state": opt_state, "param_groups": meta["optimizer"]["param_groups"]})
    parts.schedule.load_state_dict(meta["scheduler"])
    parts.state.load_state_dict(meta["trainer"])
    if meta.get("scaler") is not None and acc.scaler is not None:
        acc.scaler.load_state_dict(meta["scaler"])
    _set_rng_state(rng)


def _refuse_foreign(directory: Path, foreign: list[str]) -> None:
    if foreign:
        raise CheckpointError(
            f"{directory / foreign[0]} is not part of a lengthx checkpoint, which holds only safetensors and JSON "
            "files; refusing to load it (a pickle can run code when it is loaded). Delete that file if you trust "
            "the rest of the directory", directory)


def _load_legacy_checkpoint(directory: Path, names: list[str], parts: CheckpointParts) -> None:
    """Restore ``parts`` from an Accelerate ``save_state`` checkpoint, loading each file with
    ``torch.load(weights_only=True)``: tensors and plain containers only, anything that would run code is
    refused. Custom state 0 is the scheduler, 1 the counters (the order lengthx registered them in)."""
    from accelerate.utils import load as accelerate_load  # weights_only, plus NumPy's RNG-state types
    from safetensors.torch import load_model

    _refuse_foreign(directory, [n for n in names if not _LEGACY_FILE.fullmatch(n)])
    acc = parts.accelerator

    def read(name: str) -> Any:
        try:
            return accelerate_load(directory / name, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise CheckpointError(f"{directory / name} is missing (an incomplete checkpoint)", directory) from None
        except Exception as err:  # noqa: BLE001 - the weights-only unpickler refuses what could run code
            raise CheckpointError(f"{directory / name}: refusing to load it: it holds more than tensors and plain "
                                  f"values ({type(err).__name__})", directory) from None

    load_model(acc.unwrap_model(parts.model), str(directory / CHECKPOINT_MODEL), device="cpu")
    parts.optimizer.load_state_dict(read("optimizer.bin"))
    parts.schedule.load_state_dict(read("custom_checkpoint_0.pkl"))
    parts.state.load_state_dict(read("custom_checkpoint_1.pkl"))
    if acc.scaler is not None and "scaler.pt" in names:
        acc.scaler.load_state_dict(read("scaler.pt"))
    states = read(f"random_states_{acc.process_index}.pkl")
    random.setstate(states["random_state"])
    np.random.set_state(states["numpy_random_seed"])
    torch.set_rng_state(states["torch_manual_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])


def _save_checkpoint(parts: CheckpointParts, out: Path, step: int, keep: int) -> None:
    """:func:`save_checkpoint` into ``step-N.tmp`` then rename: a kill mid-save never leaves a half checkpoint."""
    accelerator = parts.accelerator
    ck = out / "checkpoints"
    final = ck / f"step-{step:07d}"
    tmp = ck / f"step-{step:07d}.tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        ck.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    tmp.mkdir(parents=True, exist_ok=True)
    save_checkpoint(tmp, parts)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in _checkpoints(out)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
