"""Where a ``results.csv`` row came from (docs/design.md §7, docs/results.md): the lengthx commit, the versions of
the libraries that decide the numbers, and the time it was written.
"""

from __future__ import annotations

import platform
import subprocess
import time
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the lengthx checkout, with ``+dirty`` when it has uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha or "unknown") + ("+dirty" if dirty else "")


@lru_cache(maxsize=1)
def versions() -> str:
    """Versions of the libraries that decide the numbers."""
    import torch
    import transformers

    return f"python={platform.python_version()};torch={torch.__version__};transformers={transformers.__version__}"


def now() -> str:
    """The local time, as a row's ``timestamp`` holds it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S")
