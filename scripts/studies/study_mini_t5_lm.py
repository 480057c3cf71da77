#!/usr/bin/env python
"""Which property of a small T5-LM puts it in paper A's regime? (docs/mini-t5-lm.md)

Paper A's T5-LMs break down past L_tr (T5-XL-LM: perplexity 28.3 at 2x L_tr, over 1k at 4x; Table 3) and a
temperature τ < 1 repairs them. This script measures one or more T5 checkpoints ("variants") the same way,
with the harness itself (``lengthx run task=lm`` and ``lengthx stats``, mini profile, same text at every
length), so each variant's numbers are real cells with records:

- perplexity of the same continuations with L_ex = r x L_tr encoder tokens, r in ``--ratios``;
- the paired change of the mean token NLL against L_ex = L_tr (same examples), with a 95% bootstrap interval:
  does the model degrade past L_tr?
- the paired change of NLL under log τ (paper A Eq. 3) and Algorithm 1's P_max τ against τ = 1 at the same
  L_ex: does a temperature repair it?
- P_max of encoder layer 0 at τ = 1 (``lengthx stats``): does attention disperse?

A variant is ``name=DIR[:dtype]`` (dtype ``float32`` or ``bfloat16`` at inference). Results go to
``<results>/<name>/`` (one results store per variant), the summary to ``<results>/study.md``; reruns resume.

    python scripts/studies/study_mini_t5_lm.py --variant main=lengthx/checkpoints/mini-t5-lm \\
        --variant main-bf16=lengthx/checkpoints/mini-t5-lm:bfloat16 --examples 100
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lengthx.core.runner import Runner  # noqa: E402
from lengthx.core.statistics import run_statistics  # noqa: E402
from lengthx.core.store import ResultsStore  # noqa: E402
from lengthx.models.minis import compose_run  # noqa: E402
from lengthx.report.tables.intervals import cell_scores, paired_difference_ci  # noqa: E402
from lengthx.report.tables.render import latest_ok  # noqa: E402
from lengthx.tasks.base import explicit_label  # noqa: E402

METHODS = ("none", "log", "pmax")


def variant_config(directory: str, dtype: str, results: Path, lengths: list[int], examples: int, method: str,
                   l_tr: int):
    return compose_run([
        "model=mini-t5-lm", f"model.path={directory}", f"model.l_tr={l_tr}", "task=lm", f"method={method}",
        f"task.settings=[{','.join(map(str, lengths))}]", f"task.num_examples={examples}", f"dtype={dtype}",
        f"results_dir={results}", "calibration.num_examples=2",
    ])


def measure(name: str, directory: str, dtype: str, args: argparse.Namespace) -> dict:
    """Run every cell of one variant (resumable) and return its per-length summary."""
    config = json.loads((Path(directory) / "config.json").read_text())
    meta_file = Path(directory) / "lengthx_mini.json"
    l_tr = json.loads(meta_file.read_text())["l_tr"] if meta_file.is_file() else args.l_tr
    lengths = [round(r * l_tr) for r in args.ratios]
    results = Path(args.results) / name
    for method in METHODS:
        cfg = variant_config(directory, dtype, results, lengths, args.examples, method, l_tr)
        for cell in Runner(cfg).run():
            print(f"{name}: {cell['cell']} {cell['status']} {cell.get('value', '')}", flush=True)
    stats_cfg = variant_config(directory, dtype, results, lengths, args.examples, "none", l_tr)
    run_statistics(Runner(stats_cfg))
    store = ResultsStore(results)
    ok = latest_ok(store.read())

    def nll(method: str, setting: int) -> dict[str, float]:
        label = explicit_label(setting, "tokens")
        return cell_scores(store, ok[(ok.method == method) & (ok.setting == label) & (ok.metric == "perplexity")].iloc[0],
                           "nll")

    def value(method: str, setting: str, metric: str) -> float:
        hit = ok[(ok.method == method) & (ok.setting == setting) & (ok.metric == metric)]
        return float(hit.iloc[0].value)

    base = nll("none", lengths[0])
    rows = []
    for r, length in zip(args.ratios, lengths, strict=True):
        at = nll("none", length)
        ids = sorted(at)
        label = explicit_label(length, "tokens")
        row = {"ratio": r, "L_ex": length, "ppl": value("none", label, "perplexity"),
               "pmax_l0": value("stats", label, "l0_pmax")}
        if length != lengths[0]:
            row["vs_l_tr"] = paired_difference_ci([at[i] for i in ids], [base[i] for i in ids])
        for method in METHODS[1:]:
            other = nll(method, length)
            row[method] = paired_difference_ci([other[i] for i in ids], [at[i] for i in ids])
            row[f"tau_{method}"] = value(method, label, "tau")
        rows.append(row)
    arch = (f"{config['num_layers']} enc / {config['num_decoder_layers']} dec, d_model {config['d_model']}, "
            f"{config['num_heads']} heads x {config['d_kv']}, max distance {config['relative_attention_max_distance']}")
    return {"name": name, "dir": directory, "dtype": dtype, "l_tr": l_tr, "arch": arch, "n": len(base),
            "rows": rows}


def _ci(t: tuple[float, float, float]) -> str:
    d, lo, hi = t
    mark = "" if lo <= 0 <= hi else " *"
    return f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]{mark}"


def summary_markdown(variants: list[dict]) -> str:
    """One table per variant; * marks an interval that excludes 0."""
    out = ["# mini-t5-lm regime study: measured (scripts/studies/study_mini_t5_lm.py)", "",
           "Same continuation at every length (mini profile), mean token NLL per example; intervals are 95% "
           "paired bootstrap intervals over examples (* = excludes 0). ΔNLL > 0 is worse.", ""]
    for v in variants:
        out += [f"## {v['name']}: {v['arch']}, L_tr {v['l_tr']}, {v['dtype']} ({v['n']} examples)", "",
                "| L_ex / L_tr | L_ex | ppl, τ = 1 | ΔNLL vs L_tr, τ = 1 | log τ | ΔNLL log τ vs τ = 1 "
                "| P_max τ | ΔNLL P_max τ vs τ = 1 | P_max layer 0 |", "|" + "---|" * 9]
        for r in v["rows"]:
            vs = _ci(r["vs_l_tr"]) if "vs_l_tr" in r else "–"
            out.append(f"| {r['ratio']:g} | {r['L_ex']} | {r['ppl']:.2f} | {vs} | {r['tau_log']:.2f} | {_ci(r['log'])} "
                       f"| {r['tau_pmax']:.2f} | {_ci(r['pmax'])} | {r['pmax_l0']:.3f} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", action="append", required=True, help="name=DIR[:dtype]")
    p.add_argument("--ratios", type=float, nargs="+", default=[1, 2, 4, 8, 16, 15000 / 512])
    p.add_argument("--examples", type=int, default=100)
    p.add_argument("--l-tr", type=int, default=128, help="L_tr of a checkpoint without lengthx_mini.json")
    p.add_argument("--results", default=str(ROOT / "results" / "mini-t5-lm-study"))
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    done = []
    for spec in args.variant:
        name, _, rest = spec.partition("=")
        directory, _, dtype = rest.partition(":")
        if not name or not Path(directory).is_dir():
            p.error(f"--variant {spec!r}: expected name=DIR[:dtype] with an existing DIR")
        done.append(measure(name, directory, dtype or "float32", args))
    summary = Path(args.results) / "study.md"
    previous = json.loads((summary.with_suffix(".json")).read_text()) if summary.with_suffix(".json").is_file() else {}
    merged = {**previous, **{v["name"]: v for v in done}}
    summary.with_suffix(".json").write_text(json.dumps(merged, indent=1, default=str))
    summary.write_text(summary_markdown(list(merged.values())))
    print(summary.read_text())


if __name__ == "__main__":
    main()
