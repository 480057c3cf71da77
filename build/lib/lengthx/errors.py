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
