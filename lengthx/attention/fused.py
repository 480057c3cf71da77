"""Statistics inside the fused attention pass: T5 encoder attention with P_max and entropy at plain-inference
speed (paper A Algorithm 1's FindS; docs/design.md §9).

The explicit tiles (:mod:`lengthx.attention.tiled_softmax`) write each tile of scores out and run the softmax
as separate passes over it, several times the memory traffic of SDPA's fused kernel
(``results/bench/attention.md`` compares them). This kernel (``csrc/fused_stats.cpp``, a C++ torch operator
built on first use) is a flash-style pass: scores in blocks of keys that stay in cache, an online softmax that
keeps per query row the running maximum m and the sums Z = Σ e^{s−m} and W = Σ e^{s−m}·(s − m) (rescaled when
m rises), then P_max = 1/Z and H = log Z − W/Z (:func:`lengthx.attention.stats.stats_from_sums`). Every row's
sums come out of the same pass that computes the output, so ``row_stride`` only selects rows, it does not
save work.

It covers what Algorithm 1 runs: CPU, fp32, no gradients, no dropout, keys that form one contiguous range per
example (no mask, right or left padding). Anything else keeps the explicit tiles, which stay the reference; so
does the layer-0 logit capture of Propositions 1-2, which sorts whole logit rows and so needs them written
out. The extension is compiled once per machine, torch version and source (a C++ compiler and ``ninja``) into
torch's extension cache (``TORCH_EXTENSIONS_DIR``); when it cannot be built, one warning names the reason and
the explicit tiles are used.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "fused_stats.cpp"
ENV_SWITCH = "LENGTHX_FUSED_STATS"  # 0/false/off/no turns the fused kernel off (the explicit tiles compute statistics)
OFF_VALUES, ON_VALUES = ("0", "false", "off", "no"), ("", "1", "true", "on", "yes")
Q_BLOCK = 128  # query rows per task: a task is one (example, head, block of rows)
KV_BLOCK = 512  # keys per block: a block of scores is 256 KiB, it and the key/value blocks stay in L2

# at::vec's SIMD width is chosen at compile time, so the extension is built for the capability torch detected
_CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY=AVX512",
               "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"],
}

_STATE: dict[str, Any] = {}


def _capability() -> str:
    cap = torch.backends.cpu.get_cpu_capability()
    return cap if cap in _CAPABILITY_FLAGS else "DEFAULT"


def load() -> Any | None:
    """The compiled kernel's operator namespace (``torch.ops.<name>``, with ``fused_attention``), building it on
    first use; None (after one warning) when it cannot be built or ``LENGTHX_FUSED_STATS=0``."""
    if not switched_on():
        return None
    if "module" not in _STATE:
        _STATE["module"] = _build()
    return _STATE["module"]


def switched_on() -> bool:
    """Whether :data:`ENV_SWITCH` lets the kernel run: off for ``0``, ``false``, ``off``, ``no`` (any case); a
    value that is neither on nor off is named in one warning and leaves it on."""
    value = os.environ.get(ENV_SWITCH, "").strip().lower()
    if value in OFF_VALUES:
        return False
    if value not in ON_VALUES and _STATE.get("bad_switch") != value:
        _STATE["bad_switch"] = value
        log.warning("lengthx: %s=%r is neither on (1, true, on, yes) nor off (0, false, off, no); the fused kernel "
                    "stays on", ENV_SWITCH, value)
    return True


def extension_name(text: bytes, cap: str) -> str:
    """The extension's name for this source, torch version and CPU capability; also its operator namespace
    (``torch.ops.<name>``)."""
    digest = hashlib.sha256(text + torch.__version__.encode() + cap.encode()).hexdigest()[:12]
    return f"lengthx_fused_{cap.lower()}_{digest}"


def build_directory(name: str, text: bytes) -> tuple[Path, Path]:
    """The extension's build directory in torch's cache and the copy of the source compiled there.

    ninja rebuilds when a compile command changes, and the command names the source's path; compiling a copy
    kept beside the build (written once: ``name`` carries the source's digest) keeps that path the same for
    every checkout of the repository, so a second clone or a moved checkout reuses the compiled kernel."""
    from torch.utils.cpp_extension import _get_build_directory  # where load() builds ``name`` by default

    build = Path(_get_build_directory(name, verbose=False))
    build.mkdir(parents=True, exist_ok=True)
    source = build / SOURCE.name
    if not source.is_file() or source.read_bytes() != text:
        part = source.with_name(f"{source.name}.{os.getpid()}.part")
        part.write_bytes(text)
        os.replace(part, source)
    return build, source


def _build() -> Any | None:
    from lengthx.attention.fused_build import BuildFailure, build_and_load, one_reason

    cap = _capability()
    log.info("loading the fused statistics kernel %s (compiled on first use, once per machine and torch version)",
             SOURCE.name)
    try:
        text = SOURCE.read_bytes()
        name = extension_name(text, cap)
        build, source = build_directory(name, text)
        return build_and_load(name, source, build, ["-O3", *_CAPABILITY_FLAGS.get(cap, [])])
    except BuildFailure as exc:
        reason, fix = str(exc), ""
    except Exception as exc:  # noqa: BLE001 - any other failure means: use the explicit tiles
        reason, fix = one_reason(exc)[:200], " It needs a C++ compiler and ninja (pip install ninja)."
    log.warning("lengthx: the fused statistics kernel could not be built (%s); attention statistics use the "
                "explicit tiles (slower).%s Set %s=0 to skip the build.", reason, fix, ENV_SWITCH)
    return None


def applies(query: torch.Tensor, p_drop: float) -> bool:
    """Whether a call can take the fused kernel: CPU, fp32, no dropout, no gradient, and the kernel builds."""
    if query.device.type != "cpu" or query.dtype != torch.float32 or p_drop:
        return False
    if torch.is_grad_enabled() and query.requires_grad:
        return False
    return load() is not None


def fused_attention(query: torch.Tensor, key_f: torch.Tensor, value_f: torch.Tensor, flipped: torch.Tensor,
                    bias_offset: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """softmax(scale·QKᵀ + bias)·V with keys and values reversed and the bias of query i and reversed key c at
    ``flipped[h, i + bias_offset + c]`` (the view :func:`lengthx.attention.tiled_softmax.offset_view` takes);
    returns ``(out (B, H, L_q, D_v), z, w)`` with z = Σ e^{s−m} and w = Σ e^{s−m}·(s − m) per row (B, H, L_q),
    the sums :func:`lengthx.attention.stats.stats_from_sums` turns into P_max and entropy."""
    module = load()
    if module is None:
        raise RuntimeError("the fused statistics kernel is not available (see the warning above); "
                           f"set {ENV_SWITCH}=0 to use the explicit tiles")
    b, h, q_len, _ = query.shape
    query, key_f, value_f, flipped = (t.contiguous() for t in (query, key_f, value_f, flipped))
    out = query.new_empty(b, h, q_len, value_f.shape[-1])
    z = query.new_empty(b, h, q_len)
    w = torch.empty_like(z)
    module.fused_attention(query, key_f, value_f, flipped, int(bias_offset), float(scale), out, z, w, Q_BLOCK,
                           KV_BLOCK)
    return out, z, w
