"""τ methods on paper B's perplexity (task=segmented_ppl), the extension table and its figure: cells keep their
keys, a τ method's perplexity equals one computed by hand, the best rule is chosen on OOTB."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from conftest import L_T
from test_scaling_rules import hand_reference
from transformers import AutoModelForCausalLM

from lengthx.alignment.algorithm1 import TEMPERATURE_GRID
from lengthx.attention.scaling import yarn_temperature
from lengthx.core.perplexity import PerplexityJob, planned_runs, run_task
from lengthx.core.store import ResultsStore
from lengthx.models.minis import compose_run
from lengthx.report.figures.paper_a import _save
from lengthx.report.figures.tau_vs_segmented import tau_vs_segmented_figure
from lengthx.report.tables import TABLES
from lengthx.report.tables.render import render
from lengthx.report.tables.tau_vs_segmented import BEST, CHUNK, SETTINGS, best_rules

pytestmark = pytest.mark.usefixtures("one_thread")

# the published mini-gpt2's Table 2 cells as results/mini holds them (method=none): their keys and hashes stay
TABLE2_GPT2 = {"L_t": "9c90e7502884", "2L_t": "44af4ad5ab22", "3L_t": "f4fd69eb812e", "4L_t": "4f71776b1280",
               "5L_t": "0ddbefa744c2"}


def _cells(method: str) -> dict[str, tuple[str, str]]:
    cfg = compose_run(["experiment=sb_table2", "task=segmented_ppl", "model=gpt2", "task.run=pretrained",
                       f"method={method}"])
    return {cell.setting.label: (cell.key, chash) for cell, chash in PerplexityJob(cfg).cells()}


def test_method_none_keeps_the_cells_of_results_mini_and_a_tau_method_adds_its_own():
    none, log = _cells("none"), _cells("log")
    assert {s: h for s, (_, h) in none.items()} == TABLE2_GPT2
    assert [k for k, _ in none.values()] == [f"gpt2|pretrained|segmented_ppl|{s}" for s in TABLE2_GPT2]
    assert [k for k, _ in log.values()] == [f"gpt2|pretrained+log|segmented_ppl|{s}" for s in TABLE2_GPT2]
    assert not {h for _, h in log.values()} & set(TABLE2_GPT2.values())
    cfg = compose_run(["task=segmented_ppl", "model=gpt2", "method=yarn"])
    assert {c.method for c in planned_runs(cfg)[1]} == {"pretrained+yarn"}


@pytest.mark.parametrize("method", ["prop1", "chunk-0.25"])
def test_methods_without_a_decoder_tau_are_refused(method):
    with pytest.raises(ValueError, match="task=segmented_ppl takes method= a τ method"):
        PerplexityJob(compose_run(["task=segmented_ppl", "model=gpt2", f"method={method}"]))


def _ppl_config(models, corpus, tmp_path, model: str, method: str, *extra: str):
    files = ",".join(f"'{f}'" for f in corpus)
    return compose_run([
        "task=segmented_ppl", f"model={model}", f"model.path={models[model]}", f"model.l_tr={L_T}", f"method={method}",
        "device=cpu", f"results_dir={tmp_path / 'results'}", "task.num_examples=3", "task.factors=[1,2]",
        "data=files", f"data.files=[{files}]", "data.test_percent=30", f"data.cache_dir={tmp_path / 'cache'}", *extra,
    ])


def _values(tmp_path, model: str) -> dict[tuple[str, str], float]:
    df = ResultsStore(tmp_path / "results").read().query(f"model == '{model}' and metric == 'ppl'")
    return {(r.method, r.setting): float(r.value) for r in df.itertuples()}


def test_logn_perplexity_equals_a_hand_written_attention(models, corpus, tmp_path):
    """pythia-160m (tiny NeoX): logn leaves L_t alone, changes 2L_t, and there equals the perplexity of the same
    sequences under a softmax written by hand (λ_i = log_{L_t} i past L_t)."""
    for method in ("none", "logn"):
        summary = run_task(_ppl_config(models, corpus, tmp_path, "pythia-160m", method))
        assert [s["status"] for s in summary] == ["ok", "ok"]
    got = _values(tmp_path, "pythia-160m")
    assert got[("pretrained+logn", "L_t")] == pytest.approx(got[("pretrained", "L_t")], rel=1e-5)
    assert abs(got[("pretrained+logn", "2L_t")] - got[("pretrained", "2L_t")]) > 1e-3
    job = PerplexityJob(_ppl_config(models, corpus, tmp_path, "pythia-160m", "logn"))
    ref = hand_reference(AutoModelForCausalLM.from_pretrained(models["pythia-160m"]).eval(), "logn", L_T)
    ppls = []
    for _, ids in job.task.sequences(job.model().tokenizer, 2 * L_T, 3):
        with torch.no_grad():
            ppls.append(math.exp(float(ref(input_ids=ids[None], labels=ids[None]).loss)))
    assert got[("pretrained+logn", "2L_t")] == pytest.approx(sum(ppls) / len(ppls), rel=1e-4)


def test_static_rules_and_algorithm1_on_gpt2_and_bloom(models, corpus, tmp_path):
    """yarn on GPT-2 (APE interpolated): τ = 1/mscale² in the rows, 1 at L_t; pmax calibrates on training-split
    sequences to a grid τ (cached); ssmax on BLOOM also moves L_t (its scale is below 1 before L_t)."""
    run_task(_ppl_config(models, corpus, tmp_path, "gpt2", "none"))
    run_task(_ppl_config(models, corpus, tmp_path, "gpt2", "yarn"))
    df = ResultsStore(tmp_path / "results").read().query("method == 'pretrained+yarn' and metric == 'ppl'")
    assert list(df["tau"].astype(float)) == pytest.approx([1.0, yarn_temperature(2 * L_T, L_T)])
    got = _values(tmp_path, "gpt2")
    assert got[("pretrained+yarn", "L_t")] == pytest.approx(got[("pretrained", "L_t")], rel=1e-5)
    summary = run_task(_ppl_config(models, corpus, tmp_path, "gpt2", "pmax", "calibration.num_examples=2"))
    assert [s["cell"] for s in summary] == [f"gpt2|pretrained+pmax|segmented_ppl|{s}" for s in ("L_t", "2L_t")]
    (cache,) = (tmp_path / "results" / "calibration").glob("*.json")
    saved = json.loads(cache.read_text())
    assert saved["cell"] == "gpt2|pretrained+pmax|segmented_ppl|2L_t" and saved["tau"] in TEMPERATURE_GRID
    assert saved["forward_passes"] == len(TEMPERATURE_GRID) and summary[1]["tau"] == saved["tau"]
    for method in ("none", "ssmax"):
        run_task(_ppl_config(models, corpus, tmp_path, "bloom-1b1", method))
    bloom = _values(tmp_path, "bloom-1b1")
    assert abs(bloom[("pretrained+ssmax", "L_t")] - bloom[("pretrained", "L_t")]) > 1e-4


def _row(model: str, method: str, setting: str, value: float) -> dict:
    return {"model": model, "method": method, "task": "segmented_ppl", "setting": setting, "metric": "ppl",
            "value": value, "status": "ok", "timestamp": "2026-01-01T00:00:00"}


def test_table_takes_the_best_rule_on_ootb_and_the_figure_draws_every_curve(tmp_path):
    """The derived row is chunk-0.25 with the rule whose mean OOTB perplexity is lowest (log and LongRoPE tie:
    the same τ), even where another rule would be better on chunk-0.25 itself."""
    rows = []
    for i, s in enumerate(SETTINGS):
        ootb = {"ootb": 100 + i, "ootb+log": 90 + i, "ootb+longrope": 90 + i, "ootb+yarn": 95 + i, "ootb+logn": 97}
        chunk = {CHUNK: 80 + i, f"{CHUNK}+log": 85 + i, f"{CHUNK}+logn": 70.0}
        rows += [_row("pythia-160m", m, s, float(v)) for m, v in {**ootb, **chunk}.items()]
    rows.append(_row("pythia-160m", "ootb+ssmax", "2L_t", 1.0e3))  # incomplete: not a candidate
    df = pd.DataFrame(rows)
    assert best_rules(df) == {"pythia-160m": (["log", "longrope"], 91.5)}
    spec = TABLES["ext_tau_vs_segmented"]
    out = render(spec, df)
    best = next(line for line in out.markdown.splitlines() if "best rule on OOTB" in line).split("|")[2:-1]
    assert [c.strip() for c in best] == ["85.000", "86.000", "87.000", "88.000", "86.500"]
    assert "pythia-160m: log = longrope (mean OOTB perplexity 91.500 over 2L_t–5L_t)" in out.markdown
    assert "**80.000**" in out.markdown and r"chunk-0.25 (trained at $4L_t$)" in out.latex
    assert not [m for m in out.missing if BEST in m] and [m for m in out.missing if "ootb+ssmax" in m]
    paths = tau_vs_segmented_figure(df, tmp_path / "figs", _save)
    assert [p.name for p in paths] == ["ext_tau_vs_segmented.png", "ext_tau_vs_segmented.pdf"]
    assert paths[0].stat().st_size > 10_000
