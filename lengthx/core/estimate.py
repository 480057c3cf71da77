"""What a sweep costs before it runs (docs/design.md §12): for each cell the examples, prompt tokens and forward
passes it needs (its evaluation, and Algorithm 1's calibration: one reference pass at L_tr per calibration
example, then one pass per calibration example at each τ the search tries, paper A §4), and the seconds those
passes take on one named device, from costs measured on that device:

- ``results/bench/gpu-h200.json`` (``scripts/bench/gpu/bench_gpu.py``, docs/gpu.md): the paper models' shapes on a GPU, the
  run that measured all four items (every length of item 1 and Algorithm 1's passes);
- ``results/bench/gpu-cells.json`` (``scripts/bench/gpu/bench_gpu_cells.py``, docs/gpu.md), where it exists: each paper
  model's encoder (prefill) pass, decoder step or pass and statistics pass at its longest paper setting;
- ``results/bench/estimate_costs.json`` (``scripts/bench/estimate_check.py``): the minis on a CPU, one thread.

A pass is costed at the per-token cost measured at the shortest measured length at or above its own (the cost
per token grows with the length, so this errs high). A pass whose kind, model shape or length was not measured is
counted and named as unmeasured, never costed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lengthx.alignment.algorithm1 import PAPER_TAU_MIN, temperature_grid
from lengthx.core.cells import Cell

BENCH = Path(__file__).resolve().parents[2] / "results" / "bench"
GPU_COSTS, GPU_CELLS, CPU_COSTS = BENCH / "gpu-h200.json", BENCH / "gpu-cells.json", BENCH / "estimate_costs.json"
# the paper models of the shapes scripts/bench/gpu/bench_gpu.py measures (its SHAPES: the T5 v1.1 / Flan-T5 sizes)
PAPER_SHAPES = {"flan-t5-large": "large", "t5-large-lm": "large", "flan-t5-xl": "xl", "t5-xl-lm": "xl",
                "flan-t5-xxl": "xxl", "t5-xxl-lm": "xxl"}
# τ values a bisection on an 11-point grid evaluates at most: 4 halvings and the two grid points around the crossing
BISECT_POINTS = 6
KINDS = {"encoder": "encoder passes", "decoder_step": "decoder steps (at most)", "decoder_pass": "decoder passes",
         "stats": "statistics passes (Algorithm 1, Props 1-2, stats)", "sequence": "paper B sequences"}


@dataclass
class Costs:
    """Seconds per pass measured on one device: ``passes[(kind, shape)] = {length: seconds}``; ``sources`` says
    where each kind's numbers come from."""

    device: str
    passes: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def seconds(self, kind: str, shape: str, length: int) -> float | None:
        """One pass of ``kind`` at ``length`` tokens for ``shape``, or None when nothing covers it."""
        table = self.passes.get((kind, shape)) or {}
        above = [m for m in table if m >= length]
        if not above:
            return None
        m = min(above)
        return table[m] * length / m


def gpu_costs(path: Path = GPU_COSTS, cells: Path | None = GPU_CELLS) -> Costs:
    """The GPU benchmark's passes: encoder passes of the XXL shape (lengthx's SDPA over the offset table, bf16,
    batch 1) and Algorithm 1's statistics passes at the XL shape (its grid search, s per pass); then, from
    ``cells`` where it exists, every paper model's passes at its longest setting (:func:`add_passes`)."""
    costs = Costs(f"a GPU ({path} missing: its figures unmeasured)")
    if path.exists():
        data = read_costs(path, ("meta", "cells"))
        costs.device = data["meta"]["device"]
        for c in data["cells"]:
            if c.get("status") != "ok":
                continue
            if c["item"] == 1 and c["variant"] == "lengthx-sdpa":
                costs.passes.setdefault(("encoder", c["shape"]), {})[int(c["length"])] = float(c["time_s"])
            elif c["item"] == 3 and c.get("search") == "grid":
                kind = f"stats/{c['row_stride']}"
                costs.passes.setdefault((kind, c["shape"]), {})[int(c["length"])] = c["time_s"] / (c["passes"] + 1)
                costs.sources[kind] = (f"{path.name}: Algorithm 1's grid at the {c['shape']} shape, row stride "
                                       f"{c['row_stride']}, s per pass")
        costs.sources["encoder"] = f"{path.name}: the encoder at the XXL shape, lengthx-sdpa, bf16, batch 1"
    if cells is not None and cells.exists():
        data = read_costs(cells, ("device", "passes", "how"))
        costs.device = data["device"] if not path.exists() else f"{costs.device}; {data['device']}"
        add_passes(costs, data, cells.name)
    return costs


def read_costs(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """A measured-costs file, or :class:`ValueError` naming it and the fix when it is cut short, not JSON, or lacks
    ``keys``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a costs file ({err}); it may have been cut short. Fix: restore it from git "
                         f"(git checkout -- {path}) or measure it again (docs/gpu.md, scripts/bench/estimate_check.py)") from None
    missing = [k for k in keys if not isinstance(data, dict) or k not in data]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} in it: not a costs file this lengthx reads. Fix: restore "
                         f"it from git (git checkout -- {path}) or measure it again")
    return data


def add_passes(costs: Costs, data: dict[str, Any], name: str) -> None:
    """Add the passes of a costs file (``{"passes": {kind: {shape: {length: seconds}}}, "how": {kind: text}}``,
    as ``scripts/bench/estimate_check.py`` and ``scripts/bench/gpu/bench_gpu_cells.py`` write them) to ``costs``."""
    for kind, shapes in data["passes"].items():
        for shape, table in shapes.items():
            costs.passes.setdefault((kind, shape), {}).update({int(k): float(v) for k, v in table.items()})
        source = f"{name}: {data['how'].get(kind.split('/')[0], 'measured')}"
        costs.sources[kind] = f"{costs.sources[kind]}; {source}" if kind in costs.sources else source


def cpu_costs(path: Path = CPU_COSTS) -> Costs:
    """The minis' passes on a CPU, as ``scripts/bench/estimate_check.py`` measured and wrote them."""
    if not path.exists():
        return Costs(f"this CPU ({path} missing: every figure unmeasured; python scripts/bench/estimate_check.py)")
    data = read_costs(path, ("device", "passes", "how"))
    costs = Costs(data["device"])
    add_passes(costs, data, path.name)
    return costs


def costs_for(profile: str) -> Costs:
    """The measured costs an estimate of ``profile`` uses: the GPU benchmark for the papers' models, the CPU's
    for the minis."""
    return gpu_costs() if profile == "paper" else cpu_costs()


@dataclass
class Work:
    """``count`` passes of ``kind`` at ``length`` tokens (None: unknown) of a model of ``shape``."""

    kind: str
    shape: str
    length: int | None
    count: int


@dataclass
class CellEstimate:
    """One cell's examples, prompt tokens (None: unknown) and passes."""

    cell: str
    examples: int
    tokens: int | None
    work: list[Work]


def setting_tokens(task: Any, cell: Cell) -> int | None:
    """A setting's prompt tokens: its value in tokens, else the task's ``paper_l_ex`` at its label (the token
    lengths of the paper's settings), else None."""
    if cell.setting.unit == "tokens":
        return int(cell.setting.value)
    labels, lengths = list(task.get("labels") or []), list(task.get("paper_l_ex") or [])
    if cell.setting.label in labels and len(lengths) == len(labels):
        return int(lengths[labels.index(cell.setting.label)])
    return None


def examples_of(cfg: Any) -> int | None:
    """Examples per setting, as the runner counts them (task, then profile, then the paper's count)."""
    for n in (cfg.task.get("num_examples"), cfg.profile.get("num_examples"), cfg.task.get("paper_num_examples")):
        if n is not None:
            return int(n)
    return None


def cell_estimate(cfg: Any, cell: Cell, stats: bool = False) -> CellEstimate:
    """The passes of ``cell`` of job ``cfg`` (``stats``: a ``lengthx stats`` cell)."""
    shape = PAPER_SHAPES.get(cell.model, cell.model)
    length, l_tr = setting_tokens(cfg.task, cell), int(cfg.model.l_tr)
    k, stride = int(cfg.calibration.num_examples), int(cfg.calibration.get("row_stride") or 1)
    measure = f"stats/{stride}"
    if cfg.task.name == "segmented_ppl":
        n = examples_of(cfg)
        return CellEstimate(cell.key, n or 0, None, [Work("sequence", shape, length, n or 0)])
    if stats:
        return CellEstimate(cell.key, k, None if length is None else k * length, [Work(measure, shape, length, k)])
    n = examples_of(cfg) or 0
    seen = min(length, l_tr) if length is not None and cfg.method.name == "truncation" else length
    work = [Work("encoder", shape, seen, n)]
    new_tokens = int(cfg.task.get("max_new_tokens") or 0)
    work.append(Work("decoder_step", shape, seen, n * new_tokens) if new_tokens else
                Work("decoder_pass", shape, seen, n))
    method = cfg.method
    if method.name in ("pmax", "entropy", "prop1", "prop2"):
        if method.name in ("prop1", "prop2"):
            points = 1
        elif method.get("search", "grid") == "bisect":
            points = BISECT_POINTS
        else:
            points = len(temperature_grid(method.get("tau_min") or PAPER_TAU_MIN))
        layers = "per-layer " if method.get("per_layer") else ""
        work += [Work(measure, shape, l_tr, k), Work(layers + measure, shape, length, k * points)]
    return CellEstimate(cell.key, n, None if length is None else n * length, work)


@dataclass
class Total:
    """Sums over cells: examples, tokens (and cells of unknown tokens), passes per kind, measured seconds, and
    the passes no measurement covers by (kind, shape)."""

    cells: int = 0
    examples: int = 0
    tokens: int = 0
    unknown_tokens: int = 0
    passes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    unmeasured: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, est: CellEstimate, costs: Costs) -> None:
        self.cells += 1
        self.examples += est.examples
        self.tokens += est.tokens or 0
        self.unknown_tokens += est.tokens is None
        for w in est.work:
            if not w.count and w.kind != "sequence":  # paper B's count is unknown (0) until its corpus is read
                continue
            kind = w.kind.split("/")[0].removeprefix("per-layer ")
            self.passes[kind] = self.passes.get(kind, 0) + w.count
            each = None if w.length is None or w.kind.startswith("per-layer") else \
                costs.seconds(w.kind, w.shape, w.length)
            if each is None:
                key = (w.kind, w.shape)
                self.unmeasured[key] = self.unmeasured.get(key, 0) + w.count
            else:
                self.seconds += each * w.count
