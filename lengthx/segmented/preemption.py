"""A signal held until a training loop's step ends: a scheduler's time-limit or preemption signal during
``lengthx train`` (docs/design.md §12, docs/results.md "Training runs and checkpoints"), SIGTERM and Ctrl-C during
``lengthx train-mini`` (:mod:`lengthx.minis.loop`).

Under Hydra's submitit launcher (``hydra/launcher=slurm`` or ``submitit_local``) a job receives submitit's signal
(SIGUSR2 unless ``SUBMITIT_PREEMPT_SIGNAL`` names another) ``signal_delay_s`` before its time limit, or when it is
preempted. submitit's own handler checkpoints the launcher's call and requeues the job at once, which would lose
every step since the run's last checkpoint. :func:`deferred_scheduler_signal` puts itself in front of it: the
signal is only recorded, the training loop saves a checkpoint at the next step boundary and then hands the signal
to submitit's handler, which requeues the job. The requeued job reruns the same ``lengthx train`` and resumes
from that checkpoint as any rerun does: model, optimizer, scheduler, RNG states and data position, bit for bit.
:func:`deferred_signals` is the same for any signals (the minis' loop: SIGTERM, SIGINT).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("lengthx.train")

Handler = Callable[..., Any] | int | None  # what signal.getsignal returns


def scheduler_signal() -> signal.Signals | None:
    """The signal a submitit job receives before its time limit or on preemption, or None outside a submitit
    job (``SUBMITIT_EXECUTOR`` unset)."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2").upper().removeprefix("SIG")
    return getattr(signal, f"SIG{name}", None)


class DeferredSignal:
    """Signals recorded by :meth:`record` and handed on by :meth:`hand_over` once the loop has saved a checkpoint.

    ``previous``: the handler each signal had before. ``note``: logged when a signal is recorded (the signal's
    name is its ``%s``). ``again_at_once``: a second signal, while the first waits, is handed over at once
    (pressing Ctrl-C again stops a loop whose step or save takes too long; the loop's saves are atomic)."""

    def __init__(self, previous: dict[signal.Signals, Handler], note: str | None = None,
                 again_at_once: bool = False) -> None:
        self.previous, self.note, self.again_at_once = previous, note, again_at_once
        self.received: signal.Signals | None = None

    @property
    def pending(self) -> bool:
        """Whether a signal was received and waits for the loop to hand it over."""
        return self.received is not None

    def record(self, signum: int, frame: Any) -> None:
        """The signal handler: remember the signal; the loop acts on it between two optimizer steps."""
        again = self.received is not None
        self.received = signal.Signals(signum)
        if again and self.again_at_once:
            self.hand_over()
        if self.note and not again:
            log.info(self.note, self.received.name)

    def restore(self) -> None:
        """Give each signal back the handler it had (those still ours)."""
        for signum, previous in self.previous.items():
            if signal.getsignal(signum) == self.record:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)

    def hand_over(self) -> None:
        """Give the signal received to the handler it was taken from (submitit's requeues the job and exits; the
        CLI's SIGTERM handler and Python's SIGINT handler raise :class:`lengthx.errors.Terminated` and
        KeyboardInterrupt); without one, exit with 128 + the signal's number, as the signal itself would end the
        process."""
        assert self.received is not None, "no signal to hand over"
        signum = self.received
        self.restore()
        previous = self.previous[signum]
        if callable(previous):
            previous(int(signum), None)
        raise SystemExit(128 + int(signum))


@contextmanager
def deferred_signals(signums: Iterable[signal.Signals | None], note: str | None = None,
                     again_at_once: bool = False) -> Iterator[DeferredSignal | None]:
    """Within the block, ``signums`` (None entries skipped; an ignored signal stays ignored) are recorded instead of
    acted on; yields the :class:`DeferredSignal` (its ``note`` and ``again_at_once``), or None when there is no
    signal to defer or off the main thread (where no handler can be installed). The handlers are restored when the
    block ends."""
    signums = [s for s in signums if s is not None and signal.getsignal(s) != signal.SIG_IGN]
    if not signums or threading.current_thread() is not threading.main_thread():
        yield None
        return
    deferred = DeferredSignal({s: signal.getsignal(s) for s in signums}, note, again_at_once)
    for signum in signums:
        signal.signal(signum, deferred.record)
    try:
        yield deferred
    finally:
        deferred.restore()


@contextmanager
def deferred_scheduler_signal(enabled: bool = True) -> Iterator[DeferredSignal | None]:
    """Within the block, the scheduler's signal (:func:`scheduler_signal`) is recorded instead of acted on; yields
    the :class:`DeferredSignal`, or None outside a submitit job, when not ``enabled`` (several processes train one
    run: each would save at another step) or off the main thread (where no handler can be installed)."""
    note = "%s received (time limit or preemption): checkpointing after this step, then requeueing"
    with deferred_signals([scheduler_signal() if enabled else None], note) as deferred:
        yield deferred
