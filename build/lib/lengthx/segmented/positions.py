"""Position encodings of paper B's families: linear interpolation of learned absolute position
embeddings (§3.2, :func:`interpolate_ape`) and ALiBi's slopes and biases (docs/design.md §5).
"""

from __future__ import annotations

import math

import torch


def interpolate_ape(weight: torch.Tensor, new_length: int) -> torch.Tensor:
    """Grow an absolute position-embedding matrix from L_t to L_e rows by linear interpolation (paper B §3.2).

    With β = L_e / L_t integral, row i (0 ≤ i < L_e) of the new matrix is

        e'_i = ((β − i % β) / β) · e_{⌊i/β⌋} + ((i % β) / β) · e_{⌊i/β⌋+1},   with e_{L_t} = e_{L_t − 1},

    so e'_{βi} = e_i: every old position keeps its embedding at β times its index, and the β − 1 new rows
    between two old ones lie on the segment joining them. When β is not integral the same rule is applied at
    the fractional source position i / β = i · L_t / L_e (exact integer arithmetic for the floor and the
    weight), which reduces to the formula above for integral β. Computed in float64, returned in the input
    dtype on the input device; the input is not modified.
    """
    if weight.dim() != 2:
        raise ValueError(f"interpolate_ape expects a (positions, dim) matrix, got {tuple(weight.shape)}")
    l_t = weight.shape[0]
    if new_length < l_t:
        raise ValueError(f"interpolate_ape grows the matrix: new_length={new_length} < current {l_t}")
    i = torch.arange(new_length, device=weight.device, dtype=torch.long)
    num = i * l_t  # source position i·L_t/L_e = lo + frac, in integers
    lo = torch.div(num, new_length, rounding_mode="floor")
    frac = (num - lo * new_length).double() / new_length
    hi = (lo + 1).clamp(max=l_t - 1)  # e_{L_t} = e_{L_t − 1}
    w = weight.detach().double()
    out = (1.0 - frac)[:, None] * w[lo] + frac[:, None] * w[hi]
    return out.to(weight.dtype)


def alibi_slopes(num_heads: int, device: torch.device | str | None = None) -> torch.Tensor:
    """ALiBi head slopes (Press et al., 2021), as BLOOM uses them.

    For a power of two n heads the slopes are the geometric sequence 2^(−8/n), 2^(−16/n), …, 2^(−8); otherwise
    the n' = 2^⌊log2 n⌋ slopes of n' heads are followed by every other slope of 2n' heads (the odd powers),
    until there are ``num_heads`` of them. Float32, shape (num_heads,).
    """
    if num_heads < 1:
        raise ValueError(f"num_heads must be positive, got {num_heads}")
    closest = 2 ** math.floor(math.log2(num_heads))

    def geometric(n: int, powers: torch.Tensor) -> torch.Tensor:
        base = torch.tensor(2.0 ** (-(2.0 ** -(math.log2(n) - 3))), dtype=torch.float32, device=device)
        return torch.pow(base, powers)

    slopes = geometric(closest, torch.arange(1, closest + 1, device=device, dtype=torch.int32))
    if closest != num_heads:
        extra = min(closest, num_heads - closest)
        odd = torch.arange(1, 1 + 2 * extra, 2, device=device, dtype=torch.int32)
        slopes = torch.cat([slopes, geometric(2 * closest, odd)])
    return slopes


def alibi_key_bias(slopes: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """ALiBi as a per-key bias slope_h · p_j, shape (batch, heads, 1, keys), from explicit positions.

    The ALiBi bias of query i and key j is −slope_h · (p_i − p_j). Softmax over keys ignores a term that is
    constant along a query row, so −slope_h · p_i can be dropped, leaving slope_h · p_j: the form BLOOM adds
    to its attention scores. ``positions`` are the tokens' original positions, (keys,) or (batch, keys) —
    with segmented sequences they have gaps, which is exactly what the cumulative-sum positions of stock
    BLOOM lose (paper B §3.1, docs/design.md §5).
    """
    pos = positions if positions.dim() == 2 else positions[None]
    return slopes.float()[None, :, None, None] * pos.float()[:, None, None, :]


def alibi_bias(slopes: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The full ALiBi bias −slope_h · (p_i − p_j), shape (batch, heads, queries, keys), without causal mask.

    The reference form of :func:`alibi_key_bias` (they differ by a per-row constant: the same softmax).
    """
    pos = (positions if positions.dim() == 2 else positions[None]).float()
    rel = pos[:, None, :, None] - pos[:, None, None, :]  # p_i − p_j
    return -slopes.float()[None, :, None, None] * rel
