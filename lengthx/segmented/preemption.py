"""A scheduler's time-limit or preemption signal during ``lengthx train`` (docs/design.md §12, docs/results.md
"Training runs and checkpoints").

Under Hydra's submitit launcher (``hydra/launcher=slurm`` or ``submitit_local``) a job receives submitit's signal
(SIGUSR2 unless ``SUBMITIT_PREEMPT_SIGNAL`` names another) ``signal_delay_s`` before its time limit, or when it is
preempted. submitit's own handler checkpoints the launcher's call and requeues the job at once, which would lose
every step since the run's last checkpoint. :func:`deferred_scheduler_signal` puts itself in front of it: the
signal is only recorded, the training loop saves a checkpoint at the next step boundary and then hands the signal
to submitit's handler, which requeues the job. The requeued job reruns the same ``lengthx train`` and resumes
from that checkpoint as any rerun does: model, optimizer, scheduler, RNG states and data position, bit for bit.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("lengthx.train")


def scheduler_signal() -> signal.Signals | None:
    """The signal a submitit job receives before its time limit or on preemption, or None outside a submitit
    job (``SUBMITIT_EXECUTOR`` unset)."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return None
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2").upper().removeprefix("SIG")
    return getattr(signal, f"SIG{name}", None)


class DeferredSignal:
    """The scheduler's signal, recorded by :meth:`record` and handed on by :meth:`hand_over` once the loop has
    saved a checkpoint."""

    def __init__(self, signum: signal.Signals, previous: Callable[..., Any] | int | None) -> None:
        self.signum, self.previous, self.pending = signum, previous, False

    def record(self, signum: int, frame: Any) -> None:
        """The signal handler: remember the signal; the loop acts on it between two optimizer steps."""
        self.pending = True
        log.info("%s received (time limit or preemption): checkpointing after this step, then requeueing",
                 signal.Signals(signum).name)

    def hand_over(self) -> None:
        """Give the signal to the handler it was taken from (submitit's requeues the job and exits); without
        one, exit with 128 + the signal's number, as the signal itself would end the process."""
        signal.signal(self.signum, self.previous if self.previous is not None else signal.SIG_DFL)
        if callable(self.previous):
            self.previous(int(self.signum), None)
        raise SystemExit(128 + int(self.signum))


@contextmanager
def deferred_scheduler_signal(enabled: bool = True) -> Iterator[DeferredSignal | None]:
    """Within the block, the scheduler's signal (:func:`scheduler_signal`) is recorded instead of acted on; yields
    the :class:`DeferredSignal`, or None outside a submitit job, when not ``enabled`` (several processes train one
    run: each would save at another step) or off the main thread (where no handler can be installed)."""
    signum = scheduler_signal() if enabled else None
    if signum is None or threading.current_thread() is not threading.main_thread():
        yield None
        return
    deferred = DeferredSignal(signum, signal.getsignal(signum))
    signal.signal(signum, deferred.record)
    try:
        yield deferred
    finally:
        if signal.getsignal(signum) == deferred.record:
            signal.signal(signum, deferred.previous if deferred.previous is not None else signal.SIG_DFL)
