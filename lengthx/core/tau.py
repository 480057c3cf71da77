"""Paper A's temperature from choice to use (docs/design.md §5), one lifecycle for ``lengthx run`` (encoder
prompts, :mod:`lengthx.core.runner`) and paper B's perplexity (decoder sequences, :mod:`lengthx.core.perplexity`):

- Algorithm 1's options come from the run's config in one place
  (:func:`lengthx.alignment.algorithm1.options_from_config`);
- a calibration is cached under ``<results_dir>/calibration/`` (:func:`calibration_file`), read back only when it
  records this cell's key and a τ in range (:func:`read_calibration`), and kept with what it aligned
  (:func:`keep_calibration`, :func:`alignment_info`);
- τ is applied to the model's attention modules for the span of a ``with`` block and cleared after it, however
  the block ends (:func:`applied_temperature`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lengthx.alignment.algorithm1 import Alignment
from lengthx.attention.temperature import clear_temperature, set_temperature
from lengthx.core.cells import Cell, method_id
from lengthx.core.store import read_json, safe_name, temperature_problem, write_json

log = logging.getLogger("lengthx")

# the range a cached τ must lie in: Algorithm 1 searches the grid 1.0 … 0.5 (paper A §4); the closed forms of
# Propositions 1-2 may exceed 1, never by this much
ALIGNED_TAU_RANGE = (0.0, 1.0)
CLOSED_FORM_TAU_RANGE = (0.0, 10.0)


def short_of_target(cached: dict[str, Any], mode: str, tau_min: float) -> bool:
    """Whether a calibration (its cache entry: ``tau``, ``target``, ``evaluated``; per layer: lists of them) chose
    a grid end without reaching its target (:meth:`lengthx.alignment.algorithm1.Alignment.short_of_target`)."""
    taus, targets, evaluated = cached.get("tau"), cached.get("target"), cached.get("evaluated")
    if not isinstance(taus, list):
        taus, targets, evaluated = [taus], [targets], [evaluated]
    for tau, target, ev in zip(taus, targets or [], evaluated or [], strict=False):
        if not isinstance(ev, dict) or not isinstance(target, (int, float)):
            continue
        alignment = Alignment(float(tau), float(target), {float(k): float(v) for k, v in ev.items()},
                              (tau_min, 1.0))
        if alignment.short_of_target(mode):
            return True
    return False


def calibration_file(results_dir: Path, cell: Cell, method_cfg: Any, key: dict[str, Any]) -> Path:
    """Where Algorithm 1's τ for ``cell`` under cache ``key`` is kept: ``<results_dir>/calibration/``, named by
    the cell, the method and a digest of the key."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    name = f"{cell.model}__{cell.task}__{cell.setting.label}__{method_id(method_cfg)}__{digest}.json"
    return results_dir / "calibration" / safe_name(name)


# what a cache of each kind records beside τ and its key: the statistic it aligned (Algorithm 1) or the layer-0
# statistics of both lengths (Propositions 1-2)
CACHE_FIELDS = {"aligned": ("tau", "target", "evaluated"), "closed_form": ("tau", "train", "extrapolation")}



def cache_problem(obj: dict[str, Any], key: dict[str, Any], low: float, high: float) -> str | None:
    """Why a calibration cache cannot stand for ``key`` (None when it can): τ out of (low, high], or an entry of
    the key it records that differs from ``key`` (a file edited, or copied from another model or cell)."""
    problem = temperature_problem(obj["tau"], low, high)
    if problem is not None:
        return problem
    expected = json.loads(json.dumps(key, default=str))
    for name, value in expected.items():
        if obj.get(name) != value:
            return f"records {name}={json.dumps(obj.get(name))[:80]}, not this cell's {json.dumps(value)[:80]}"
    return None


def read_calibration(path: Path, key: dict[str, Any], kind: str = "aligned") -> dict[str, Any] | None:
    """The cached calibration at ``path`` if it stands for ``key`` (``kind``: ``aligned``, Algorithm 1, or
    ``closed_form``, Propositions 1-2); a damaged one (not JSON, no τ or statistics, a τ out of range, another
    cell's key) is set aside and None returned, so it is recomputed."""
    low, high = ALIGNED_TAU_RANGE if kind == "aligned" else CLOSED_FORM_TAU_RANGE
    return read_json(path, required=CACHE_FIELDS[kind], check=lambda obj: cache_problem(obj, key, low, high))


def keep_calibration(path: Path, key: dict[str, Any], tau: float | list[float], info: dict[str, Any], cell_key: str,
                     method: str, kind: str = "aligned") -> None:
    """Cache a computed τ with its key and what it aligned (``info``); a τ out of range is an error, never
    cached."""
    low, high = ALIGNED_TAU_RANGE if kind == "aligned" else CLOSED_FORM_TAU_RANGE
    problem = temperature_problem(tau, low, high)
    if problem is not None:
        raise ValueError(f"{cell_key}: {method} computed τ that {problem.removeprefix('has ')}; nothing cached")
    write_json(path, {**key, "tau": tau, **info})
    log.info("%s: τ=%s (%d forward passes)", cell_key, tau, info["forward_passes"])


def alignment_info(result: Alignment) -> dict[str, Any]:
    """What a cache records of Algorithm 1's search beside τ: the target, every evaluated τ, the passes."""
    return {"target": result.target, "evaluated": {str(k): v for k, v in result.evaluated.items()},
            "forward_passes": result.forward_passes}


@contextmanager
def applied_temperature(loaded: Any, tau: Any, scope: str) -> Iterator[list[Any]]:
    """``tau`` on ``loaded``'s attention modules of ``scope`` while the block runs (none touched at τ = 1),
    cleared after it, whether it ends, fails or is interrupted."""
    modules = loaded.family.temperature_modules(loaded.model, scope) if tau != 1.0 else []
    set_temperature(modules, tau)
    try:
        yield modules
    finally:
        clear_temperature(modules)
