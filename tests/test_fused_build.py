"""The fused statistics kernel never hangs a run and never fails silently (lengthx.attention.fused_build,
docs/design.md §9): a stale build lock is taken over, a compile has a time limit, a damaged cached library is
rebuilt, the operator refuses tensors it cannot read, and the switch takes the usual words for off.

The cases that hung run in a child process with a time limit, in a build cache of their own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lengthx.attention import fused

KERNEL = fused.load()
needs_kernel = pytest.mark.skipif(KERNEL is None, reason="the fused kernel could not be built here (no compiler)")
LOAD = "import lengthx.attention.fused as f; m = f.load(); print('KERNEL', m is not None)"


def _load_in_child(env: dict[str, str], timeout: float = 120) -> tuple[bool, str]:
    """(whether ``fused.load()`` returned the kernel, stderr) in a fresh process; a child still running after
    ``timeout`` seconds is killed with everything it started, and the test fails (it hung)."""
    full = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    proc = subprocess.Popen([sys.executable, "-c", LOAD], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"loading the kernel hung for more than {timeout} s")
    assert proc.returncode == 0, err[-3000:]
    return "KERNEL True" in out, err


def _own_build(tmp_path: Path) -> tuple[Path, Path]:
    """A build cache of this test's own (``TORCH_EXTENSIONS_DIR``) holding a copy of the compiled kernel; returns
    (the cache, the kernel's build directory in it)."""
    from torch.utils.cpp_extension import _get_build_directory

    text = fused.SOURCE.read_bytes()
    name = fused.extension_name(text, fused._capability())
    cache = tmp_path / "extensions"
    build = cache / name
    shutil.copytree(_get_build_directory(name, verbose=False), build)
    (build / "lock").unlink(missing_ok=True)
    return cache, build


@needs_kernel
def test_a_stale_build_lock_is_taken_over(tmp_path):
    """A compile that was killed leaves torch's ``lock`` file in the build directory; the next load takes the
    build over with one line naming the lock, and gets the kernel, instead of waiting forever."""
    cache, build = _own_build(tmp_path)
    (build / "lock").touch()
    loaded, err = _load_in_child({"TORCH_EXTENSIONS_DIR": str(cache)}, timeout=90)
    assert loaded, err[-2000:]
    lines = [ln for ln in err.splitlines() if "stale build lock" in ln]
    assert len(lines) == 1 and str(build / "lock") in lines[0], err[-2000:]
    assert not (build / "lock").exists()


def test_a_compiler_that_hangs_is_stopped_by_the_time_limit(tmp_path):
    """A compiler that never returns: after the time limit the compile is killed, one warning says so, and the
    explicit tiles take over (the load returns no kernel), within seconds rather than never."""
    hang = tmp_path / "c++"
    hang.write_text("#!/bin/sh\nsleep 300\n")
    hang.chmod(0o755)
    loaded, err = _load_in_child({"TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"), "CXX": str(hang),
                                  "LENGTHX_FUSED_COMPILE_TIMEOUT": "4"}, timeout=90)
    assert not loaded
    warnings = [ln for ln in err.splitlines() if "could not be built" in ln]
    assert len(warnings) == 1 and "within 4 s" in warnings[0] and "LENGTHX_FUSED_COMPILE_TIMEOUT" in warnings[0]


def test_without_a_compiler_the_warning_names_it_and_torch_says_nothing(tmp_path):
    """No compiler: one warning from lengthx naming the missing compiler, not torch's banner about an
    incompatible compiler nor advice to install ninja."""
    loaded, err = _load_in_child({"TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
                                  "CXX": str(tmp_path / "no-such-c++")})
    assert not loaded
    assert "compatible" not in err, err[-2000:]
    warnings = [ln for ln in err.splitlines() if "could not be built" in ln]
    assert len(warnings) == 1 and "no C++ compiler" in warnings[0] and "ninja" not in warnings[0], err[-2000:]


@needs_kernel
@pytest.mark.slow
def test_an_empty_cached_library_is_rebuilt_once(tmp_path):
    """A cached ``.so`` left empty (a full disk, a killed copy) in place is rebuilt, and the kernel loads, with no
    warning; before, every run warned to install a compiler and ninja and nothing rebuilt it."""
    cache = tmp_path / "extensions"
    loaded, err = _load_in_child({"TORCH_EXTENSIONS_DIR": str(cache)}, timeout=400)  # built there, as a user's
    assert loaded, err[-2000:]
    (library,) = cache.glob("*/*.so")
    library.write_bytes(b"")
    loaded, err = _load_in_child({"TORCH_EXTENSIONS_DIR": str(cache)}, timeout=400)
    assert loaded, err[-2000:]
    assert library.stat().st_size > 0
    assert "could not be built" not in err


@pytest.mark.parametrize("value", ["false", "off", "No", "0"])
def test_the_switch_takes_the_usual_words_for_off(monkeypatch, value):
    """``LENGTHX_FUSED_STATS=false`` (or off, no, 0) turns the kernel off."""
    monkeypatch.setenv(fused.ENV_SWITCH, value)
    assert fused.load() is None
    assert not fused.applies(torch.zeros(1, 1, 4, 8), 0.0)


# each case in a child process: an operator that reads past a buffer may crash it, and that must fail the test,
# not the test run
MISMATCHES = """
import torch
from lengthx.attention import fused

cases = {"matching": {}, "keys of another batch": {"k": (1, 2, 40, 8)}, "values with fewer heads": {"v": (2, 1, 40, 8)},
         "keys of another head dimension": {"k": (2, 2, 40, 4)}, "values with fewer keys": {"v": (2, 2, 30, 8)},
         "a table with fewer heads": {"f": (1, 79)}, "an output too small": {"out": (2, 2, 40, 4)},
         "statistics too small": {"z": (1, 2, 40)}}
kernel = fused.load()
for what, change in cases.items():
    t = dict(q=(2, 2, 40, 8), k=(2, 2, 40, 8), v=(2, 2, 40, 8), f=(2, 79), out=(2, 2, 40, 8), z=(2, 2, 40),
             w=(2, 2, 40))
    t.update(change)
    x = {name: torch.randn(*shape) for name, shape in t.items()}
    try:
        kernel.fused_attention(x["q"], x["k"], x["v"], x["f"], 0, 0.5, x["out"], x["z"], x["w"], fused.Q_BLOCK,
                               fused.KV_BLOCK)
        print("ran:", what, flush=True)
    except RuntimeError as err:
        print("refused:", what, "|", str(err).splitlines()[0], flush=True)
"""


@needs_kernel
def test_the_operator_refuses_mismatched_shapes():
    """Tensors whose batch, heads, head dimension, key count or table width do not match are refused with a
    message naming the tensor, instead of being read past their end (NaN, 4.9e36, or a crash)."""
    proc = subprocess.run([sys.executable, "-c", MISMATCHES], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, f"the operator crashed (status {proc.returncode}): {proc.stdout[-2000:]}"
    lines = proc.stdout.splitlines()
    assert lines[0] == "ran: matching" and len(lines) == 8, proc.stdout
    for line in lines[1:]:
        assert line.startswith("refused:") and "fused attention" in line, line


def _inputs(b=2, h=2, n=40, d=8, dv=8):
    torch.manual_seed(0)
    return dict(q=torch.randn(b, h, n, d), k=torch.randn(b, h, n, d), v=torch.randn(b, h, n, dv),
                f=torch.randn(h, 2 * n - 1), out=torch.empty(b, h, n, dv), z=torch.empty(b, h, n),
                w=torch.empty(b, h, n))


def _call(t: dict[str, torch.Tensor]) -> None:
    KERNEL.fused_attention(t["q"], t["k"], t["v"], t["f"], 0, 0.5, t["out"], t["z"], t["w"], fused.Q_BLOCK,
                           fused.KV_BLOCK)


@needs_kernel
def test_the_operator_refuses_other_dtypes_and_strides():
    """A float64 tensor or a non-contiguous one is refused, naming it."""
    _call(_inputs())  # the matching tensors run
    t = _inputs()
    t["v"] = t["v"].double()
    with pytest.raises(RuntimeError, match="value_f is Double"):
        _call(t)
    t = _inputs()
    t["w"] = torch.empty(2, 2, 80)[..., ::2]
    with pytest.raises(RuntimeError, match="w_out is not contiguous"):
        _call(t)


# A stand-in for the C++ compiler: it logs each call and "compiles" by copying the kernel already built on this
# machine (every link writes it as the library asked for), so a build takes a moment instead of a real compile;
# calls that build nothing (torch asks for the compiler's version) go to the real one.
FAKE_COMPILER = """#!/bin/sh
out=""; prev=""
for arg in "$@"; do [ "$prev" = "-o" ] && out="$arg"; prev="$arg"; done
[ -z "$out" ] && exec c++ "$@"
echo "$*" >> "{calls}"
case "$out" in
  *.so) cp "{library}" "$out" ;;
  *) : > "$out"; printf '%s:\\n' "$out" > "$out.d" ;;
esac
"""
LOAD_LOGGED = "import logging; logging.basicConfig(level=logging.INFO, format='%(message)s'); " + LOAD


def _second_venv(tmp_path: Path) -> Path:
    """Another virtual environment with the same torch build at another path (its own ``site-packages/torch``, a
    link to this one's), as a second venv of a lab's machine has; returns its python."""
    import sysconfig

    venv = tmp_path / "venv-b"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "torch").symlink_to(Path(torch.__file__).parent, target_is_directory=True)
    (site / "this-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return venv / "bin" / "python"


@needs_kernel
def test_one_compile_is_shared_by_venvs_and_announced_once(tmp_path):
    """Two virtual environments with the same torch build share torch's extension cache: the first compiles the
    kernel, saying so in one line before it starts; the second loads that library, compiling nothing and saying
    nothing about a compile. Before, each venv's torch wrote its own paths into the build's commands, so every
    venv recompiled in turn, without a word."""
    from torch.utils.cpp_extension import _get_build_directory

    name = fused.extension_name(fused.SOURCE.read_bytes(), fused._capability())
    library = Path(_get_build_directory(name, verbose=False)) / f"{name}.so"
    calls = tmp_path / "compiler-calls.txt"
    compiler = tmp_path / "c++"
    compiler.write_text(FAKE_COMPILER.format(calls=calls, library=library))
    compiler.chmod(0o755)
    python_b = _second_venv(tmp_path)
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
           "CXX": str(compiler), "PYTHONPATH": root,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    stderr = {}
    for venv, python in (("a", sys.executable), ("b", str(python_b))):
        proc = subprocess.run([python, "-c", LOAD_LOGGED + "; import torch; print('TORCH', torch.__file__)"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "KERNEL True" in proc.stdout, proc.stderr[-3000:]
        stderr[venv] = proc.stderr
        if venv == "b":  # the second venv's torch is at its own path
            assert f"TORCH {python_b.parents[1]}" in proc.stdout, proc.stdout
    announced = [ln for ln in stderr["a"].splitlines() if "compiling the fused statistics kernel" in ln]
    assert len(announced) == 1, stderr["a"][-3000:]
    assert "compiling" not in stderr["b"], stderr["b"][-3000:]
    compiles = [ln for ln in calls.read_text().splitlines() if " -c " in f" {ln} "]
    assert len(compiles) == 1, calls.read_text()
