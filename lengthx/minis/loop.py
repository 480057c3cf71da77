"""The one training loop of the minis (docs/design.md, "The minis' trainers"): a recipe supplies the batch, the
loss and the learning rate; the loop owns the optimizer step, the boxes (steps, minutes, a stop step), the
exact resume from ``state.pt`` and the time accounting.

A run may also keep a portable resume point, ``resume.pt`` (``Box.portable``): the weights in fp16 and the loop's and
recipe's state, without the optimizer's moments, small enough to commit beside a study's curve. A run directory
that has lost its ``state.pt`` (a fresh clone) resumes from it: the optimizer starts afresh at that step
(``state["optimizer_fresh_at"]``; a recipe may warm its learning rate up again from there), so that resume is
close to, not bit for bit, the uninterrupted run.

A step is always: set the recipe's learning rate, ``loss = recipe.loss(step)``, zero the gradients, backward,
clip the gradient norm at 1, ``optimizer.step()``. A recipe draws its batch ``step`` either from a generator
whose state it saves (:meth:`Recipe.state_parts`) or from a generator seeded by ``(seed, step)``, so a resumed
run takes the same batches as an uninterrupted one and ends on the same weights, bit for bit.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from lengthx.segmented.preemption import deferred_signals


def log(msg: str) -> None:
    """One timestamped line on stdout (the trainers' progress)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass(frozen=True)
class Box:
    """When a run stops and how often it saves.

    ``max_steps`` is the schedule's length; ``stop_step`` stops earlier without changing the schedule (it retrains
    a snapshot of a longer run exactly); ``max_minutes`` (0: none) is cumulative over resumes. The state is saved
    every ``save_every_steps`` steps and/or ``save_every_minutes`` minutes (0: not by that clock), and at the end;
with ``portable``, ``resume.pt`` is written beside it each time.
    """

    max_steps: int
    max_minutes: float = 0.0
    stop_step: int | None = None
    save_every_steps: int = 0
    save_every_minutes: float = 0.0
    portable: bool = False


class Recipe(Protocol):
    """What a mini brings to the loop."""

    def lr(self, loop: TrainingLoop) -> float:
        """The learning rate of step ``loop.step`` (it may read ``loop.progress``)."""

    def loss(self, step: int) -> torch.Tensor:
        """Draw batch ``step``, run the forward pass and return the scalar loss to minimise."""

    def after_step(self, loop: TrainingLoop) -> None:
        """After ``loop.step`` was incremented: curves, curricula, snapshots (time spent inside
        :meth:`TrainingLoop.untimed` is not training time); set ``loop.state["stopped"]`` to stop."""

    def state_parts(self) -> dict[str, Any]:
        """Entries of ``state.pt`` beside the model, optimizer and loop state (tensors and plain types only)."""

    def load_state_parts(self, saved: dict[str, Any]) -> None:
        """Restore what :meth:`state_parts` saved."""


class TrainingLoop:
    """Run ``recipe`` on ``model`` / ``optimizer`` in the run directory ``out`` (``state.pt``, ``curve.json``).

    ``state`` is the loop's own record, saved with the weights: ``step``, the training seconds under
    ``seconds_key``, ``curve`` (rows the recipe appends), ``stopped`` (a reason, or None) and whatever else the
    recipe keeps there. Its key names are the recipe's, so a run directory written before stays resumable.
    """

    def __init__(self, out: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, recipe: Recipe,
                 box: Box, state: dict[str, Any], seconds_key: str = "seconds") -> None:
        self.out, self.model, self.optimizer, self.recipe, self.box = out, model, optimizer, recipe, box
        self.state = {"curve": [], "stopped": None, **state, "step": int(state.get("step", 0))}
        self.state.setdefault(seconds_key, 0.0)
        self.seconds_key = seconds_key
        self.checkpoint = out / "state.pt"
        self.portable = out / "resume.pt"
        self._tick = self._last_save = time.time()

    # -------------------------------------------------------------------------------------------- state
    @property
    def step(self) -> int:
        return int(self.state["step"])

    @property
    def minutes(self) -> float:
        """Training minutes so far (evaluation, export and saving excluded), over every resume."""
        return float(self.state[self.seconds_key]) / 60

    @property
    def progress(self) -> float:
        """How far the run is through its box: the larger of its step and its minute fraction (0 to 1)."""
        p = self.step / self.box.max_steps
        return max(p, self.minutes / self.box.max_minutes) if self.box.max_minutes > 0 else p

    def resume(self) -> bool:
        """Load ``state.pt`` if the run directory has one, else ``resume.pt`` (its optimizer starting afresh);
        tensors and plain types only: no pickled code."""
        if self.checkpoint.exists():
            saved = torch.load(self.checkpoint, map_location="cpu", weights_only=True)
            self.optimizer.load_state_dict(saved["opt"])
            how = ""
        elif self.portable.exists():
            saved = torch.load(self.portable, map_location="cpu", weights_only=True)
            saved["state"]["optimizer_fresh_at"] = int(saved["state"]["step"])
            how = " (fp16 weights, the optimizer starting afresh)"
        else:
            return False
        self.model.load_state_dict(saved["model"])  # an fp16 entry is copied into the fp32 parameter
        self.recipe.load_state_parts(saved)
        self.state = {"curve": [], "stopped": None, **saved["state"]}
        log(f"resumed from {self.checkpoint if not how else self.portable} at step {self.step} "
            f"({self.minutes:.1f} min){how}")
        return True

    def save(self) -> None:
        """``state.pt``, ``curve.json`` and, with ``Box.portable``, ``resume.pt``, each written atomically (a file
        is the old one or the new one, whenever the process is stopped)."""
        self.out.mkdir(parents=True, exist_ok=True)
        parts = {**self.recipe.state_parts(), "state": self.state}
        _atomic_save({"model": self.model.state_dict(), "opt": self.optimizer.state_dict(), **parts}, self.checkpoint)
        if self.box.portable:
            _atomic_save({"model": _half(self.model.state_dict()), **parts}, self.portable)
        _atomic_save(json.dumps(self.state["curve"], indent=1), self.out / "curve.json")
        self._last_save = self._tick = time.time()

    @contextmanager
    def untimed(self) -> Iterator[None]:
        """Time spent inside is not training time (held-out evaluation, exports)."""
        try:
            yield
        finally:
            self._tick = time.time()

    # --------------------------------------------------------------------------------------------- run
    def running(self) -> bool:
        stop = self.box.stop_step
        return self.progress < 1 and self.state["stopped"] is None and (stop is None or self.step < stop)

    def run(self) -> None:
        """Optimizer steps until a box is full or the recipe stops the run; the state is saved at the end.

        SIGTERM or Ctrl-C (SIGINT) is held until the step under way ends (its ``after_step`` included): the state
        is saved there, then the signal goes to the handler it had (``lengthx``'s raises
        :class:`lengthx.errors.Terminated`, exit 143; Python's KeyboardInterrupt, 130), so a rerun resumes from the
        step the run reached. A second signal while the first waits stops the run at once (the saves are atomic).
        The handlers are restored when the run ends."""
        self.model.train()
        self._tick = self._last_save = time.time()
        with deferred_signals((signal.SIGTERM, signal.SIGINT), again_at_once=True) as stop:
            while self.running() and not (stop is not None and stop.pending):
                self._one_step()
            if stop is not None and stop.pending:
                log(f"{stop.received.name} received: saving the state at step {self.step}, then stopping "
                    "(rerun to resume; again to stop at once)")
            self.save()
        if stop is not None and stop.pending:  # a signal during the last step or save: it stops the run too
            stop.hand_over()

    def _one_step(self) -> None:
        """One optimizer step, the recipe's ``after_step`` and the periodic save."""
        lr = self.recipe.lr(self)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss = self.recipe.loss(self.step)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.state["step"] = self.step + 1
        now = time.time()
        self.state[self.seconds_key] += now - self._tick
        self._tick = now
        self.recipe.after_step(self)
        every_steps = self.box.save_every_steps and self.step % self.box.save_every_steps == 0
        every_minutes = self.box.save_every_minutes and time.time() - self._last_save > 60 * self.box.save_every_minutes
        if every_steps or every_minutes:
            self.save()


def _half(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """fp16 copies of the floating-point entries on the CPU; entries that share storage (tied embeddings) share
    their copy, so it is saved once."""
    copies: dict[tuple[Any, ...], torch.Tensor] = {}
    same = lambda v: (v.data_ptr(), v.shape, v.stride(), v.dtype)  # noqa: E731 - the same tensor, not a view of it
    for v in weights.values():
        if same(v) not in copies:
            copies[same(v)] = v.detach().to("cpu", torch.float16 if v.is_floating_point() else v.dtype)
    return {k: copies[same(v)] for k, v in weights.items()}


def _atomic_save(obj: dict[str, Any] | str, path: Path) -> None:
    """``obj`` (a state for ``torch.save``, or text) written to ``path.tmp`` and renamed over ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(obj, str):
        tmp.write_text(obj)
    else:
        torch.save(obj, tmp)
    os.replace(tmp, path)

