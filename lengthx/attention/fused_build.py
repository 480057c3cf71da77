"""Building and loading the fused statistics kernel (docs/design.md §9) without ever hanging a run.

torch compiles an extension under a lock file of its own (``<build>/lock``, created with ``O_EXCL``) and waits,
with no limit, for any process that holds it; a compile that is killed leaves that file behind, and every later
load then waits forever. Its compile has no time limit either. So lengthx:

- loads a library that is already built directly (``torch.ops.load_library``), without ninja: a second
  virtual environment of the same torch build finds the library and does not compile it again;
- compiles, when it must, in a child process with a time limit (:data:`TIMEOUT_ENV`, default
  :data:`DEFAULT_TIMEOUT` seconds), under an ``flock`` of its own (``<build>/lengthx-build.lock``, holding the
  owner's PID) that the operating system releases when its owner dies; holding it, any torch ``lock`` left in
  the build directory is stale, and is removed with one line saying so;
- rebuilds, once, a cached library that fails to load (an empty or damaged file), and names what failed:
  no compiler, no ninja, the time limit, the compiler's own error, or a library that still does not load.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lengthx.locks import try_owned_lock

log = logging.getLogger(__name__)

TIMEOUT_ENV = "LENGTHX_FUSED_COMPILE_TIMEOUT"  # seconds a compile may take before the explicit tiles are used
DEFAULT_TIMEOUT = 600.0
OWN_LOCK = "lengthx-build.lock"  # lengthx's lock; torch's own is ``lock``

# the compile, in a child process: torch's JIT build of one C++ source into ``<build>/<name>.so``
_COMPILE = """
import sys
from torch.utils.cpp_extension import load
name, source, build, *flags = sys.argv[1:]
load(name=name, sources=[source], extra_cflags=flags, build_directory=build, is_python_module=False, verbose=False)
"""


class BuildFailure(RuntimeError):
    """The kernel could not be had; the message names what failed and how to fix it."""


def compile_timeout() -> float:
    """The compile's time limit in seconds (:data:`TIMEOUT_ENV`; a value that is not a positive number is a
    :class:`BuildFailure` naming it)."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value:
        raise BuildFailure(f"{TIMEOUT_ENV}={text!r} is not a positive number of seconds; fix: unset it (default "
                           f"{DEFAULT_TIMEOUT:g}) or set it to e.g. 600")
    return value


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def build_lock(build: Path, timeout: float) -> Iterator[None]:
    """Hold lengthx's lock on ``build`` (waiting at most ``timeout`` seconds for another process's compile),
    then remove a torch ``lock`` file left there by a compile that was killed, saying so in one line."""
    path = build / OWN_LOCK
    deadline, announced = time.monotonic() + timeout, False
    fd, previous = try_owned_lock(path)
    while fd is None:
        if not announced:
            log.info("lengthx: waiting for process %s, which is compiling the fused statistics kernel in %s",
                     previous, build)
            announced = True
        if time.monotonic() > deadline:
            raise BuildFailure(f"process {previous} has held {path} for more than {timeout:g} s ({TIMEOUT_ENV})")
        time.sleep(0.2)
        fd, previous = try_owned_lock(path)
    try:
        stale = build / "lock"
        if stale.exists():
            age = time.time() - stale.stat().st_mtime
            who = (f"process {previous}, which no longer runs" if previous.isdigit() and not _pid_alive(int(previous))
                   else "a compile that was killed")
            stale.unlink(missing_ok=True)
            log.warning("lengthx: removed the stale build lock %s (%.0f s old, left by %s); taking the build over",
                        stale, age, who)
        yield
    finally:
        os.close(fd)  # releases the flock


def _compiler_problem(env: dict[str, str]) -> str | None:
    """Why torch cannot compile here, before it is asked (so its own banners never come first), or None."""
    compiler = env.get("CXX", "c++")
    if shutil.which(compiler, path=env.get("PATH")) is None:
        return (f"no C++ compiler: `{compiler}` is not on PATH. Fix: install one (e.g. apt-get install g++) or set "
                "CXX to its path")
    if shutil.which("ninja", path=env.get("PATH")) is None:
        return "ninja is not on PATH. Fix: pip install ninja"
    return None


def _reason(output: str) -> str:
    """The line of a failed compile that says why: the compiler's first error, else the last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln.lower() or "fatal" in ln.lower():
            return ln[:300]
    return (lines[-1] if lines else "no output")[:300]


def compile_library(name: str, source: Path, build: Path, flags: list[str], timeout: float) -> None:
    """Compile ``source`` into ``<build>/<name>.so`` in a child process, killed (with its compiler) after
    ``timeout`` seconds; raises :class:`BuildFailure` naming what failed."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # a venv's ninja
    problem = _compiler_problem(env)
    if problem is not None:
        raise BuildFailure(problem)
    log.info("lengthx: compiling the fused statistics kernel into %s (once per torch build and source; up to "
             "%g s, %s)", build, timeout, TIMEOUT_ENV)
    proc = subprocess.Popen([sys.executable, "-c", _COMPILE, name, str(source), str(build), *flags], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        (build / "lock").unlink(missing_ok=True)  # torch's lock of the compile just killed
        raise BuildFailure(f"the compile did not finish within {timeout:g} s. Fix: check the compiler "
                           f"(`{env.get('CXX', 'c++')}`), or raise {TIMEOUT_ENV}") from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    if proc.returncode != 0:
        record = build / "lengthx-compile.log"
        record.write_text(output, encoding="utf-8")
        raise BuildFailure(f"the compile failed: {_reason(output)} (the compiler's output: {record})")


def load_library(library: Path, name: str) -> Any:
    """``torch.ops.<name>`` after loading ``library``."""
    import torch

    torch.ops.load_library(str(library))
    return getattr(torch.ops, name)


def build_and_load(name: str, source: Path, build: Path, flags: list[str]) -> Any:
    """The operator namespace of extension ``name``: the library in ``build`` loaded as it is, else compiled
    (with a time limit) and loaded; a library that does not load is rebuilt once. Raises :class:`BuildFailure`."""
    timeout = compile_timeout()
    library = build / f"{name}.so"
    with build_lock(build, timeout + 60):
        first_error = None
        if library.is_file():
            try:
                return load_library(library, name)
            except (OSError, RuntimeError) as err:
                first_error = one_reason(err)
                log.info("lengthx: the cached kernel %s could not be loaded (%s); rebuilding it once", library,
                         first_error)
                library.unlink(missing_ok=True)
        compile_library(name, source, build, flags, timeout)
        try:
            return load_library(library, name)
        except (OSError, RuntimeError) as err:
            raise BuildFailure(f"the library {library} does not load even after a rebuild ({one_reason(err)}"
                               f"{f'; before it: {first_error}' if first_error else ''}). Fix: delete {build} "
                               "and rerun") from err


def one_reason(err: BaseException) -> str:
    """The last line of an exception's message (its type's name when it has none), at most 300 characters."""
    text = str(err).strip()
    return (text.splitlines()[-1] if text else type(err).__name__)[:300]
