"""Which kernel computes P_max and entropy of T5's encoder attention (config ``attention.stats_backend``;
paper A §4, Algorithm 1's FindS; docs/gpu.md, "Statistics in one Triton pass").

* ``auto`` (the default): on CUDA the Triton pass of :mod:`lengthx.attention.triton_stats` whenever the
  ``triton`` package imports and the kernel passes :func:`self_check` on that device (checked once per device
  and process); otherwise, with one warning naming the reason, the explicit device blocks
  (``tiled_softmax._explicit_blocks``). On the CPU: the fused kernel or the tiles, as before.
* ``triton``: the Triton pass, or an error naming the fix where it cannot run.
* ``blocks``: the explicit path on every device (the fallback, asked for by name).

The self-check runs the kernel once on a small problem (two examples, one of them padded, τ = 0.7) and compares
its output, P_max and entropy with the explicit softmax in fp32 on the same device: a kernel that compiles but
computes wrongly on some GPU falls back instead of feeding Algorithm 1 wrong statistics.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

STATS_BACKENDS = ("auto", "triton", "blocks")
CHECK_TOLERANCE = 1e-3  # fp32 inputs, fp32 sums: the kernel agrees with the explicit softmax to ~1e-6

_checked: dict[str, str | None] = {}  # device → None (the kernel passed its self-check) or why it did not


def self_check(device: torch.device) -> str | None:
    """None when the Triton statistics kernel imports, runs on ``device`` and matches the explicit fp32 softmax
    (output, P_max and entropy within :data:`CHECK_TOLERANCE`); else the reason, in a few words."""
    try:
        from lengthx.attention import triton_stats
    except ImportError as exc:
        return f"triton does not import ({exc})"
    if not triton_stats.supported(device):
        return f"the kernel does not run on {device.type}"
    from lengthx.attention.stats import stats_from_sums

    gen = torch.Generator().manual_seed(0)
    b, h, n, d, tau = 2, 2, 96, 64, 0.7
    q, k, v = (torch.randn(b, h, n, d, generator=gen) for _ in range(3))
    table = torch.randn(h, 2 * n - 1, generator=gen) * 2.0
    keep = torch.ones(b, n, dtype=torch.bool)
    keep[1, 70:] = False  # the second example right-padded
    try:
        out, z, w = triton_stats.attention_stats(*(t.to(device) for t in (q, k, v, table)), d ** -0.5 / tau,
                                                 1.0 / tau, keep.to(device), 1)
        pmax, entropy = (t.cpu() for t in stats_from_sums(z, w))
        out = out.cpu().transpose(1, 2)  # (B, H, L, D)
    except Exception as exc:  # noqa: BLE001 - any failure to compile or run means: fall back
        return f"the kernel failed: {type(exc).__name__}: {exc}"
    idx = torch.arange(n)
    scores = (q @ k.transpose(-1, -2) * d ** -0.5 + table[:, idx[None, :] - idx[:, None] + n - 1]) / tau
    probs = torch.softmax(scores.masked_fill(~keep[:, None, None, :], float("-inf")), -1)
    ref = {"output": probs @ v, "P_max": probs.amax(-1),
           "entropy": -(probs * probs.clamp_min(1e-30).log()).sum(-1)}
    for name, got in (("output", out), ("P_max", pmax), ("entropy", entropy)):
        err = float((got.float() - ref[name]).abs().max())
        if not err <= CHECK_TOLERANCE:
            return f"its {name} differs from the explicit softmax by {err:.2e}"
    return None


def use_triton(stats_backend: str, device: torch.device,
               check: Callable[[torch.device], str | None] = self_check) -> bool:
    """Whether statistics on ``device`` come from the Triton pass under ``attention.stats_backend``.

    ``triton``: yes (the caller raises where it cannot run); ``blocks``: no; ``auto``: on CUDA when ``check``
    passes on that device, else no, with one warning per device naming the reason and the setting."""
    if stats_backend == "triton":
        return True
    if stats_backend != "auto" or device.type != "cuda":
        return False
    key = _key(device)
    if key not in _checked:
        _checked[key] = check(device)
        if _checked[key] is not None:
            warnings.warn(f"attention.stats_backend=auto: the Triton statistics kernel is not used on {key} "
                          f"({_checked[key]}); statistics come from the explicit device blocks, several times "
                          "slower. Fix: pip install 'lengthx[gpu]' (triton), or attention.stats_backend=blocks to "
                          "ask for the blocks", RuntimeWarning, stacklevel=2)
    return _checked[key] is None


def _key(device: torch.device) -> str:
    """``cuda:N`` for a CUDA device (``cuda`` alone is the current one), so that a model's tensors and a
    ``torch.device("cuda")`` name one check."""
    if device.type == "cuda" and device.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)


def describe(device: torch.device) -> str:
    """What ``auto`` computed statistics with on ``device`` in this process, in words (for reports)."""
    if device.type != "cuda":
        return "the CPU's paths (fused kernel or tiles)" if device.type == "cpu" else "the explicit blocks"
    key = _key(device)
    if key not in _checked:
        return f"not used on {key} in this run"
    reason = _checked[key]
    return (f"the Triton pass on {key} (its self-check passed)" if reason is None
            else f"the explicit blocks on {key} ({reason})")
