"""Every paper model's largest cell on one GPU, end to end (docs/gpu.md, "Every paper model's largest cell").

For each model the paper profile's experiments run (``lengthx/conf/experiment/``, ``experiment_info.models.paper``
and the paper B tables' ``model`` lists), at its longest paper setting:

- paper A: ``lengthx run`` through the harness's own :class:`~lengthx.core.runner.Runner` (``profile=paper``,
  ``method=none``) on the task setting with the longest L_ex (ties: the most generated tokens), given in tokens, and,
  where its experiments run Algorithm 1, one statistics pass over every query row at that length (FindS, paper A
  §4, the paper profile's row stride); also the encoder (prefill) pass and a decoder step alone, for the estimate;
- paper B: ``lengthx train`` (:func:`lengthx.segmented.loop.train`, ``profile=paper``, its micro-batch) of the
  run its tables list with the longest training sequences (``full`` at 4·L_t for the development models, else
  ``chunk-0.25`` at 4·L_t; paper B §5.2-5.3), a few optimizer steps from the saved weights.

Weights are random at the model's real configuration (below, from each hub repository's ``config.json``), the
tokenizer is a shipped mini's with its vocabulary padded to the real tokenizer's size, both saved with
``save_pretrained`` into a local directory the run loads as ``model.path=DIR``: values change neither time nor
memory. Written: ``results/bench/gpu-cells.md`` and ``.json`` (wall time per example or training sequence,
``torch.cuda.max_memory_allocated``, fits or OOM); the JSON's ``passes`` are costs ``lengthx plan profile=paper
--estimate`` reads beside ``gpu.json`` (:mod:`lengthx.core.estimate`). Cells run largest first within
``--budget-s``; an out-of-memory or any error is its cell's row.

    python scripts/bench/gpu/bench_gpu_cells.py                 # on a GPU -> results/bench/gpu-cells.md
    python scripts/bench/gpu/bench_gpu_cells.py --smoke         # tiny configs, the same pipeline, any device
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

T_START = time.monotonic()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[3]
for _entry in (ROOT, ROOT / "scripts" / "bench", ROOT / "scripts" / "bench" / "gpu"):
    if str(_entry) not in sys.path:
        sys.path.insert(0, str(_entry))

import torch  # noqa: E402
from bench_gpu_cells_models import ARCH, CONF, _yaml, arch_key, build_dir, entry, size  # noqa: E402
from bench_gpu_cells_report import STEP_TOKENS, cell_key, measured, merge_reports, render, report_data  # noqa: E402
from bench_gpu_core import free_device  # noqa: E402

SMOKE = dict(length=256, l_t=32, examples=1, steps=2)


@dataclass
class Cell:
    """One model's largest paper cell: a ``lengthx run`` task setting (paper A) or a ``lengthx train`` run (B)."""

    model: str
    paper: str
    task: str  # paper A: the task; paper B: the training run, e.g. full-4x
    length: int  # prompt tokens (A) or training sequence tokens (B)
    new_tokens: int = 0
    algorithm1: bool = False
    result: dict[str, Any] = field(default_factory=dict)


def _sweep(exp: dict[str, Any], key: str) -> list[str]:
    value = ((exp.get("hydra") or {}).get("sweeper") or {}).get("params", {}).get(key, "")
    return [v.strip() for v in str(value).split(",") if v.strip() and "$" not in v]


def paper_cells(conf: Path = CONF, smoke: bool = False) -> list[Cell]:
    """The largest cell of every model the paper profile's experiments run (conf/experiment/*.yaml), largest
    models first."""
    tasks: dict[str, set[str]] = {}
    methods: dict[str, set[str]] = {}
    runs: dict[str, set[str]] = {}
    for path in sorted((conf / "experiment").glob("*.yaml")):
        exp = _yaml(path)
        info = exp.get("experiment_info") or {}
        if info.get("command") == "stats":
            continue  # a lengthx stats sweep: its unit is the statistics pass measured beside each cell
        if "task.run" in ((exp.get("hydra") or {}).get("sweeper") or {}).get("params", {}):
            for m in _sweep(exp, "model"):
                runs.setdefault(m, set()).update(_sweep(exp, "task.run"))
            continue
        for m in str((info.get("models") or {}).get("paper", "")).split(","):
            tasks.setdefault(m, set()).update(_sweep(exp, "task"))
            only = (info.get("methods_of") or {}).get(m)
            methods.setdefault(m, set()).update(only or _sweep(exp, "method"))
    cells = []
    for model, names in tasks.items():
        best = None
        for name in names:
            task = _yaml(conf / "task" / f"{name}.yaml")
            key = (max(task["paper_l_ex"]), int(task.get("max_new_tokens") or 0), name)
            best = max(best or key, key)
        cells.append(Cell(model, "A", best[2], SMOKE["length"] if smoke else best[0], best[1],
                          bool(methods[model] & {"pmax", "entropy"})))
    for model, names in runs.items():
        l_t = SMOKE["l_t"] if smoke else int(entry(model)["l_tr"])
        trained = [(beta * l_t if m == "full" else l_t, beta, f"{m}-{beta}x")
                   for m, beta in ((r[1], int(r[2])) for r in (re.fullmatch(r"(.+)-(\d+)x", n) for n in names) if r)]
        length, _, run = max(trained)
        cells.append(Cell(model, "B", run, length))
    return sorted(cells, key=lambda c: (-size(c.model), c.model))


class Bench:
    """The run: device, budget, cells and the report, rewritten after every cell."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.device = args, torch.device(args.device)
        self.cuda, self.work = self.device.type == "cuda", Path(args.work or tempfile.mkdtemp(prefix="gpu-cells-"))
        self.cells: list[Cell] = []
        os.environ.setdefault("LENGTHX_CACHE", str(self.work / "cache"))

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - T_START)

    def reset(self) -> None:
        free_device(self.device)

    def gib(self, peak: bool = True) -> float | None:
        if not self.cuda:
            return None
        return round((torch.cuda.max_memory_allocated() if peak else torch.cuda.memory_allocated()) / 2**30, 2)

    def timed(self, fn: Any) -> tuple[float, Any]:
        if self.cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0, out

    def guarded(self, res: dict[str, Any], fn: Any) -> None:
        """``fn`` into ``res``; an out-of-memory (fits: no) or any error (one line) is the result instead."""
        try:
            res.update(fn())
        except torch.OutOfMemoryError as err:
            res.update(status="oom", fits=False, peak_gib=self.gib(), error=str(err).splitlines()[0][:160])
        except Exception as err:  # noqa: BLE001 - a failing cell is a row; the run goes on
            traceback.print_exc(limit=6)
            res.update(status="error", error=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:240])

    def overrides(self, cell: Cell, path: Path) -> list[str]:
        out = ["profile=paper", f"model={cell.model}", f"model.path={path}", f"device={self.args.device}"]
        return out + ([f"model.l_tr={SMOKE['l_t']}"] if self.args.smoke and cell.paper == "B" else [])

    def run_a(self, cell: Cell, path: Path) -> dict[str, Any]:
        """``lengthx run`` of the cell (method none, its setting in tokens), then the passes the estimate costs."""
        from lengthx.core.runner import Runner
        from lengthx.core.store import ResultsStore
        from lengthx.models.minis import compose_run

        n = SMOKE["examples"] if self.args.smoke else self.args.examples
        cfg = compose_run(self.overrides(cell, path) + [
            *(["task.source=stdlib"] if "source" in _yaml(CONF / "task" / f"{cell.task}.yaml") else []),
            f"task={cell.task}", "method=none", f"task.settings=[{cell.length}]", "task.unit=tokens",
            f"task.num_examples={n}", f"results_dir={self.work / 'results' / cell.model}"])
        self.reset()
        load_s, runner = self.timed(lambda: Runner(cfg))
        load_s += self.timed(lambda: runner.loaded)[0]
        weights = self.gib(peak=False)
        where = {str(d) for d in (getattr(runner.loaded.model, "hf_device_map", None) or {}).values()}
        self.reset()
        run_s, summary = self.timed(runner.run)
        status = summary[0]["status"]
        rows = ResultsStore(cfg.results_dir).read()
        res = {"status": status, "fits": status == "ok" and not where & {"cpu", "disk"}, "examples": n,
               "per_example_s": round(run_s / n, 3), "load_s": round(load_s, 1), "weights_gib": weights,
               "peak_gib": self.gib(), "offloaded": sorted(where & {"cpu", "disk"}),
               "error": "" if status == "ok" else str(rows.message.iloc[-1])[:240]}
        if status == "ok":  # a pass that fails is named beside the cell, which fitted
            extra: dict[str, Any] = {}
            self.guarded(extra, lambda: self.passes(cell, runner, cfg))
            res.update(extra if "status" not in extra else {"passes": f"{extra['status']}: {extra['error']}"})
        return res

    def passes(self, cell: Cell, runner: Any, cfg: Any) -> dict[str, Any]:
        """The encoder (prefill) pass, a decoder step (or, for a likelihood task, the decoder pass) and Algorithm
        1's statistics pass at the cell's length, each timed alone on the loaded model."""
        from lengthx.alignment.statistics import capture_stats

        loaded, out = runner.loaded, {}
        vocab = loaded.model.config.vocab_size
        ids = torch.randint(5, min(vocab, 30000), (1, cell.length), generator=torch.Generator().manual_seed(0))
        batch = {"input_ids": ids.to(loaded.device), "attention_mask": torch.ones_like(ids).to(loaded.device)}
        model = loaded.model
        with torch.inference_mode():
            prefill = model.get_encoder() if model.config.is_encoder_decoder else model
            out["encoder_s"] = self.timed(lambda: prefill(**batch))[0]
            if cell.new_tokens:
                gen = [self.timed(lambda k=k: model.generate(**batch, max_new_tokens=k, min_new_tokens=k,
                                                             do_sample=False))[0] for k in (1, 1 + STEP_TOKENS)]
                # no larger than the two runs' jitter: unmeasured (None), never a step costed at 0 s
                out["decoder_step_s"] = (gen[1] - gen[0]) / STEP_TOKENS if gen[1] > gen[0] else None
            else:
                out["decoder_pass_s"] = max(0.0, self.timed(lambda: model(**batch, labels=ids[:, :128].to(
                    loaded.device)))[0] - out["encoder_s"])
        if cell.algorithm1:
            self.reset()
            stride = int(cfg.calibration.row_stride)
            stats: dict[str, Any] = {"row_stride": stride}
            self.guarded(stats, lambda: {"time_s": round(self.timed(lambda: capture_stats(
                loaded, [batch], 1.0, "encoder", row_stride=stride))[0], 3), "peak_gib": self.gib(), "fits": True})
            out["stats"] = stats
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}

    def run_b(self, cell: Cell, path: Path) -> dict[str, Any]:
        """``lengthx train`` of the cell's run from the saved weights, a few optimizer steps (no export)."""
        from lengthx.models.minis import compose_train
        from lengthx.segmented.loop import train

        method, beta = re.fullmatch(r"(.+)-(\d+)x", cell.task).groups()
        steps = SMOKE["steps"] if self.args.smoke else self.args.steps
        cfg = compose_train(self.overrides(cell, path) + [
            f"method={method}", f"l_e_factor={beta}", "start=pretrained", "data=stdlib", "data.max_docs=200",
            f"train.output_dir={self.work / 'runs' / cell.model}", "train.overwrite=true", "train.save_every=0",
            "train.grad_accum=1", f"train.max_steps={steps + 100}", f"train.stop_after_steps={steps}",
            "train.progress=false", "train.log_every=1"])
        self.reset()
        wall, result = self.timed(lambda: train(cfg))
        curve = [r for r in result.curve if r.get("tokens_per_s")]
        per_seq = cell.length / float(curve[-1]["tokens_per_s"])  # the last step: warm-up done
        return {"status": "ok", "fits": True, "steps": result.step, "batch": int(cfg.train.batch_size),
                "per_example_s": round(per_seq, 4), "tokens_s": curve[-1]["tokens_per_s"], "wall_s": round(wall, 1),
                "peak_gib": self.gib()}

    def run(self) -> None:
        """Every cell, largest model first; models of one architecture (Flan-T5 and T5-LM) share one directory."""
        cells = [c for c in paper_cells(smoke=self.args.smoke) if not self.args.only or c.model in self.args.only]
        done = self.earlier()
        built: dict[str, dict[str, Any]] = {}
        for k, cell in enumerate(cells):
            self.cells.append(cell)
            if cell_key(asdict(cell)) in done:
                cell.result = done[cell_key(asdict(cell))]
                continue
            if self.left() < self.args.reserve_s:
                cell.result = {"status": "skipped: budget"}
                self.save()
                continue
            key = arch_key(cell.model)
            path = self.work / "models" / key
            print(f"[{time.monotonic() - T_START:6.0f}s] {cell.model}: {cell.task} @ {cell.length}", flush=True)
            try:
                if key not in built:
                    built[key] = {}
                    self.guarded(built[key], lambda c=cell, p=path: build_dir(c.model, p, self.device, self.args.smoke))
                cell.result.update(built[key], before_gib=self.gib(peak=False))  # what an earlier cell left
                if "status" not in cell.result:
                    self.guarded(cell.result, lambda c=cell, p=path: (self.run_a if c.paper == "A" else self.run_b)(c, p))
            finally:
                if k + 1 == len(cells) or arch_key(cells[k + 1].model) != key:
                    shutil.rmtree(path, ignore_errors=True)
                self.reset()
            print(f"        {cell.result}", flush=True)
            self.save()

    def earlier(self) -> dict[tuple[str, str, str, int], dict[str, Any]]:
        """``--resume``: the results of an earlier run's JSON by cell (model, paper, task, length), those it
        measured or that failed; cells it skipped for its budget run again. Absent file: nothing."""
        path = Path(self.args.resume) if self.args.resume else None
        if path is None or not path.is_file():
            return {}
        earlier = json.loads(path.read_text())
        here = report_data([], self.args, self.device)["device"]
        if earlier.get("device") != here:
            raise SystemExit(f"error: --resume {path} was measured on {earlier.get('device')}, this run is on {here}: "
                             "its timings are not this device's. Fix: --resume a report of this device, or none")
        return {cell_key(c): c["result"] for c in earlier.get("cells", []) if measured(c.get("result", {}))}

    def save(self) -> None:
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        data = report_data(self.cells, self.args, self.device)
        out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
        out.write_text(render(data))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny configurations and lengths, any device")
    p.add_argument("--out", default=None, help="report (default results/bench/gpu-cells.md, with --smoke "
                   "gpu-cells_smoke.md); the JSON beside it")
    p.add_argument("--budget-s", type=float, default=540.0, help="wall-time budget: later cells are skipped")
    p.add_argument("--reserve-s", type=float, default=40.0, help="no new cell starts with less than this left")
    p.add_argument("--examples", type=int, default=2, help="paper A: examples of the run")
    p.add_argument("--steps", type=int, default=3, help="paper B: optimizer steps (the last one is timed)")
    p.add_argument("--only", nargs="*", default=None, help="these models only")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cuda or cpu")
    p.add_argument("--resume", default=None, metavar="JSON", help="keep the cells an earlier run's JSON measured "
                   "(or saw fail); run those it skipped for its budget")
    p.add_argument("--work", default=None, help="scratch folder for model directories, results and runs")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON", help="no run: the reports of several calls "
                   "(a later call's measured cells replace the earlier's) into --out, on any machine")
    args = p.parse_args(argv)
    if args.merge:
        missing = [m for m in args.merge if not Path(m).is_file()]
        if missing or not args.out:
            print(f"error: --merge {' '.join(missing) or '…'}: {'no such file' if missing else 'needs --out'}. Fix: "
                  "name the JSONs the GPU calls wrote, and --out for the merged report", file=sys.stderr)
            return 2
        try:
            data = merge_reports([(Path(m).name, json.loads(Path(m).read_text())) for m in args.merge])
        except ValueError as err:
            print(f"error: --merge: {err}", file=sys.stderr)
            return 2
        Path(args.out).with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
        Path(args.out).write_text(render(data))
        return 0
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if not args.smoke and not args.device.startswith("cuda"):
        print("error: no CUDA device: the paper models' shapes need a GPU. Fix: run on a GPU, or --smoke",
              file=sys.stderr)
        return 2
    unknown = sorted(set(args.only or []) - set(ARCH))
    if unknown:
        print(f"error: --only {' '.join(unknown)}: not a paper model. Fix: name some of {', '.join(ARCH)}",
              file=sys.stderr)
        return 2
    args.out = args.out or str(ROOT / "results" / "bench" / ("gpu-cells_smoke.md" if args.smoke else "gpu-cells.md"))
    bench = Bench(args)
    try:
        bench.run()
    finally:
        bench.save()
        if not args.work:
            shutil.rmtree(bench.work, ignore_errors=True)
    print(Path(args.out).read_text())
    return 0 if all(c.result.get("status") in ("ok", "skipped: budget") for c in bench.cells) else 1


if __name__ == "__main__":
    sys.exit(main())
