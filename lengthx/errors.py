"""The one base class of the mistakes a user can fix (docs/results.md, "Errors").

A :class:`UserError` names what is wrong (a config key, a file and line, a directory) and how to fix it; the
``lengthx`` command prints it as one line and exits with status 2, without a traceback (``--debug`` or
``LENGTHX_DEBUG=1`` shows it). It lives in its own module so the command can catch it without importing the
libraries that raise it.
"""

from __future__ import annotations

import os


class UserError(Exception):
    """A mistake in the command line, the config, a file or the environment, reported as one line (exit 2)."""


def one_line(text: str) -> str:
    """``text`` with its lines joined: an error message as the one line the command prints."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


def debug_enabled() -> bool:
    """Whether ``--debug`` or ``LENGTHX_DEBUG=1`` asked for tracebacks."""
    return os.environ.get("LENGTHX_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


class UsageError(UserError):
    """A user mistake reported as one paragraph, without a traceback."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (what a cluster scheduler or ``kill`` sends), handled like Ctrl-C: what was finished is kept and
    the command says how to resume; the exit status is 143 (128 + 15) instead of Ctrl-C's 130."""

    exit_status = 143
    what = "terminated (SIGTERM)"


def interrupted(err: KeyboardInterrupt) -> tuple[str, int]:
    """(the word for it, the exit status) of Ctrl-C (130) or SIGTERM (:class:`Terminated`, 143)."""
    if isinstance(err, Terminated):
        return err.what, err.exit_status
    return "interrupted", 130


def raise_terminated(signum: int, frame: object) -> None:
    """A SIGTERM handler: stop the command the way Ctrl-C does (:class:`Terminated`)."""
    raise Terminated()


class JobsFailed(Exception):
    """Jobs of a sweep on a submitit launcher that ended without finishing (killed, failed, timed out too many
    times): one line naming the first job's cells, its log and the rerun that resumes them (exit 1)."""


def stopped_by_the_scheduler(err: BaseException | None) -> bool:
    """Whether ``err`` is, or was raised while handling, submitit's ``UncompletedJobError``: what submitit raises
    from its signal handler, wherever the job then is, when a job may not be requeued (timed out too many times;
    docs/cluster.md). It ends the job, never the cell: a library that wraps what it catches (a tokenizer's
    ValueError) must not turn it into an error row."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if type(err).__name__ == "UncompletedJobError" and type(err).__module__.startswith("submitit"):
            return True
        err = err.__cause__ or err.__context__
    return False
