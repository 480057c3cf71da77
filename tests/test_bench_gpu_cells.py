"""scripts/bench/gpu/bench_gpu_cells.py (docs/gpu.md, "Every paper model's largest cell"): the cells it picks from the configs,
the random-weight checkpoints at the real configurations, and ``--smoke`` end to end on the CPU, read back by
``lengthx plan --estimate``'s cost reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench" / "gpu" / "bench_gpu_cells.py"
sys.path[:0] = [str(ROOT / "scripts" / "bench" / "gpu"), str(ROOT / "scripts" / "bench")]

import bench_gpu_cells as cells_bench  # noqa: E402
from bench_gpu_cells_models import ARCH, MINI_OF_FAMILY, build_dir, entry, model_config, size  # noqa: E402

from lengthx.core.estimate import gpu_costs  # noqa: E402
from lengthx.models.loading import check_model_dir  # noqa: E402
from lengthx.models.minis import compose_run  # noqa: E402

CONF = ROOT / "lengthx" / "conf"


def _paper_models() -> set[str]:
    """Every model an experiment runs in the paper profile, read from the experiment files directly."""
    out = set()
    for path in (CONF / "experiment").glob("*.yaml"):
        exp = yaml.safe_load(path.read_text())
        paper = str(((exp.get("experiment_info") or {}).get("models") or {}).get("paper", ""))
        swept = str(exp["hydra"]["sweeper"]["params"].get("model", ""))
        out |= {m for m in (paper + "," + swept).split(",") if m and "$" not in m}
    return out


def test_every_paper_model_has_one_cell_at_its_longest_setting():
    picked = cells_bench.paper_cells()
    assert sorted(c.model for c in picked) == sorted(_paper_models()) == sorted(ARCH)
    for c in picked:
        if c.paper == "A":
            task = yaml.safe_load((CONF / "task" / f"{c.task}.yaml").read_text())
            assert c.length == max(task["paper_l_ex"]) and c.new_tokens == int(task["max_new_tokens"] or 0)
    by = {c.model: c for c in picked}
    assert (by["flan-t5-xxl"].task, by["flan-t5-xxl"].length, by["flan-t5-xxl"].algorithm1) == ("lines", 14960, True)
    assert not by["longchat-13b-16k"].algorithm1  # Table 4's baseline row runs method none only
    assert by["t5-xl-lm"].task == "lm" and by["codet5p-770m-py"].task == "code_completion"
    l_t = {m: int(entry(m)["l_tr"]) for m in ("gpt2", "bloom-1b1")}
    assert (by["gpt2"].task, by["gpt2"].length) == ("full-4x", 4 * l_t["gpt2"])  # Table 3: full at 4·L_t
    assert (by["bloom-1b1"].task, by["bloom-1b1"].length) == ("chunk-0.25-4x", l_t["bloom-1b1"])
    assert [size(c.model) for c in picked] == sorted((size(c.model) for c in picked), reverse=True)


@pytest.mark.parametrize("name", sorted(ARCH))
def test_the_real_configuration_has_the_models_stated_size(name):
    """Within 5% of conf/model's ``params`` (model cards count a T5's shared embedding once more)."""
    cfg = model_config(name)
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    with torch.device("meta"):
        model = (AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else AutoModelForCausalLM).from_config(cfg)
    n = sum(p.numel() for p in model.parameters())
    assert abs(n - size(name)) / size(name) < 0.05, (name, n, size(name))


@pytest.mark.parametrize("name", ["bloom-1b1", "pythia-160m", "flan-t5-large", "longchat-13b-16k"])
def test_a_random_checkpoint_passes_the_harness_checks_with_the_real_vocabulary(tmp_path, name):
    info = build_dir(name, tmp_path / name, torch.device("cpu"), smoke=True)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / name)
    assert len(tokenizer) == ARCH[name][2] and info["params"] > 0
    cfg = compose_run(["profile=paper", f"model={name}", f"model.path={tmp_path / name}"])
    check_model_dir(cfg.model)  # family, shapes, vocabulary against the embeddings, special ids
    mini = AutoTokenizer.from_pretrained(ROOT / "lengthx" / "checkpoints" / MINI_OF_FAMILY[entry(name)["family"]])
    text = "The passkey is 31415. Remember it.\n    def f(x): return x"
    assert tokenizer(text)["input_ids"] == mini(text)["input_ids"]  # the added pieces are never produced


def test_bad_input_is_one_line_and_exit_2(capsys):
    assert cells_bench.main(["--smoke", "--only", "gpt-5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not a paper model" in err and "Fix" in err
    assert cells_bench.main(["--device", "cpu"]) == 2
    assert "need a GPU" in capsys.readouterr().err


# Four models stand for the rest (the list of cells itself is checked against the configs above): a Flan-T5 encoder
# with Algorithm 1's statistics pass, T5-LM's decoder pass, a LLaMA model (paper A, no statistics pass measured) and
# GPT-2 trained by paper B; every further model would cost the suite's time about four seconds more.
SMOKE_MODELS = ("flan-t5-xxl", "t5-large-lm", "longchat-13b-16k", "gpt2")


@pytest.mark.slow  # about twenty seconds: four models at tiny dimensions through lengthx run / train
def test_smoke_runs_every_kind_of_cell_and_the_estimate_reads_its_passes(tmp_path):
    out = tmp_path / "gpu-cells.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--device", "cpu", "--out", str(out),
                           "--work", str(tmp_path / "work"), "--only", *SMOKE_MODELS], capture_output=True, text=True, timeout=900, env=env,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    results = {c["model"]: c["result"] for c in data["cells"]}
    assert set(results) == set(SMOKE_MODELS) and all(r["status"] == "ok" and r["fits"] for r in results.values()), results
    assert all(r["per_example_s"] > 0 for r in results.values())
    assert all("time_s" in r["stats"] for c in data["cells"] if c["algorithm1"] for r in [c["result"]])
    text = out.read_text()
    assert text.count("| yes |") == len(SMOKE_MODELS) and "## Paper A" in text and "## Paper B" in text
    costs = gpu_costs(tmp_path / "no-gpu.json", out.with_suffix(".json"))
    xxl = results["flan-t5-xxl"]
    assert costs.seconds("encoder", "xxl", 256) == pytest.approx(xxl["encoder_s"])  # the first of its shape
    assert costs.seconds("decoder_step", "xxl", 128) == pytest.approx(xxl["decoder_step_s"] / 2)
    assert costs.seconds("decoder_pass", "large", 256) == pytest.approx(results["t5-large-lm"]["decoder_pass_s"])
    assert costs.seconds("stats/1", "longchat-13b-16k", 256) is None and "gpu-cells.json" in costs.sources["encoder"]


def test_resume_keeps_what_an_earlier_run_measured_and_reruns_what_it_skipped(tmp_path):
    """A second GPU call goes on from the first's JSON: measured or failed cells are kept as they were, cells the
    first skipped for its budget are not copied (here the budget is spent at once, so they are skipped anew)."""
    picked = [c for c in cells_bench.paper_cells(smoke=True) if c.model in SMOKE_MODELS]
    earlier = {"device": "CPU (bench_gpu_cells, smoke)", "cells": [{"model": c.model, "paper": c.paper, "task": c.task, "length": c.length,
                          "result": {"status": "ok", "fits": True, "per_example_s": 1.5 + i}} for i, c in
                         enumerate(picked)]}
    earlier["cells"][-1]["result"] = {"status": "skipped: budget", "from_the_file": True}
    earlier["cells"][0]["result"] = {"status": "oom", "fits": False}
    (tmp_path / "first.json").write_text(json.dumps(earlier))
    out = tmp_path / "second.md"
    argv = ["--smoke", "--device", "cpu", "--budget-s", "0", "--resume", str(tmp_path / "first.json"), "--out",
            str(out), "--work", str(tmp_path / "work"), "--only", *SMOKE_MODELS]
    assert cells_bench.main(argv) == 1  # the kept OOM cell is a failure of the whole run
    second = json.loads(out.with_suffix(".json").read_text())["cells"]
    assert [c["result"] for c in second[:-1]] == [c["result"] for c in earlier["cells"][:-1]]
    assert second[-1]["result"] == {"status": "skipped: budget"}
    assert not (tmp_path / "work" / "models").exists()  # nothing was built
    earlier["device"] = "NVIDIA H100 80GB HBM3 (bench_gpu_cells)"  # another device's timings are never kept
    (tmp_path / "first.json").write_text(json.dumps(earlier))
    with pytest.raises(SystemExit, match="was measured on NVIDIA H100"):
        cells_bench.main(argv)


_META = {"date": "d", "torch": "t", "transformers": "x", "smoke": False, "budget_s": 10.0}


def _cell(model, status, **result):
    """One paper-A cell of a report's JSON with the given result."""
    return {"model": model, "paper": "A", "task": "lines", "length": 100, "new_tokens": 0, "algorithm1": False,
            "result": {"status": status, **result}}


def _merged(tmp_path, reports: dict) -> tuple[list, object, dict]:
    """The reports written under their names, merged with ``--merge`` (exit 0): (paths, report, merged JSON)."""
    paths = [tmp_path / name for name in reports]
    for path, data in zip(paths, reports.values(), strict=True):
        path.write_text(json.dumps(data))
    out = tmp_path / "merged.md"
    assert cells_bench.main(["--merge", *map(str, paths), "--out", str(out)]) == 0
    return paths, out, json.loads(out.with_suffix(".json").read_text())


def test_merge_joins_calls_keeping_each_cells_last_measured_result(tmp_path):
    """A session's calls as one report (``--merge``): a later measurement replaces an earlier one, a later budget
    skip does not, cells only a later call lists are added, and the estimate's passes come from the merged cells."""
    cell, meta = _cell, _META
    base = {"device": "GPU", "measured_by": "scripts/bench/gpu/bench_gpu_cells.py", "how": {"encoder": "e"}, "passes": {}}
    first = {**base, "meta": meta, "cells": [cell("flan-t5-xxl", "ok", encoder_s=2.0, decoder_step_s=0.0),
                                           cell("flan-t5-xl", "skipped: budget")]}
    second = {**base, "meta": {**meta, "budget_s": 5.0}, "cells": [
        cell("flan-t5-xxl", "skipped: budget"), cell("flan-t5-xl", "ok", encoder_s=1.0), cell("gpt2", "skipped: budget")]}
    paths, out, merged = _merged(tmp_path, {"call1.json": first, "call2.json": second})
    assert [(c["model"], c["result"]["status"]) for c in merged["cells"]] == [
        ("flan-t5-xxl", "ok"), ("flan-t5-xl", "ok"), ("gpt2", "skipped: budget")]
    assert merged["passes"]["encoder"] == {"xxl": {"100": 2.0}, "xl": {"100": 1.0}}
    assert "decoder_step" not in merged["passes"]  # a step lost in the timing jitter is no cost of 0 s
    assert merged["meta"]["budget_s"] == 15.0 and "over 2 calls (call1.json, call2.json)" in out.read_text()
    assert cells_bench.main(["--merge", str(tmp_path / "call9.json"), "--out", str(out)]) == 2
    smoke = tmp_path / "smoke.json"  # a CPU smoke report never replaces a GPU's timings under its name
    smoke.write_text(json.dumps({**second, "device": "CPU (bench_gpu_cells, smoke)"}))
    assert cells_bench.main(["--merge", str(paths[0]), str(smoke), "--out", str(tmp_path / "m2.md")]) == 2
    assert not (tmp_path / "m2.md").exists()


def test_merge_of_two_gpus_names_each_cells_device(tmp_path):
    """Calls on two GPUs (one session's H100, a later one's H200) merge into one report in which every measured
    cell names the device that measured it, in the JSON and in its table row; a skipped cell names none."""
    def cell(model, status):
        return _cell(model, status, fits=status == "ok", per_example_s=1.0)

    meta = _META
    h100 = {"device": "NVIDIA H100 80GB HBM3 (bench_gpu_cells)", "passes": {}, "meta": meta,
            "cells": [cell("flan-t5-xxl", "ok"), cell("flan-t5-xl", "skipped: budget"), cell("gpt2", "skipped: budget")]}
    h200 = {"device": "NVIDIA H200 (bench_gpu_cells)", "passes": {}, "meta": meta, "cells": [cell("flan-t5-xl", "ok")]}
    _, out, merged = _merged(tmp_path, {"h100.json": h100, "h200.json": h200})
    assert [c["result"].get("device") for c in merged["cells"]] == [h100["device"], h200["device"], h100["device"]]
    rows = {line.split(" | ")[0].strip("| "): line for line in out.read_text().splitlines() if line.startswith("| ")}
    assert rows["flan-t5-xxl"].endswith("| NVIDIA H100 80GB HBM3 |")
    assert rows["flan-t5-xl"].endswith("| NVIDIA H200 |")
    assert rows["gpt2"].endswith("|  |")  # skipped: measured nowhere
    assert "NVIDIA H100 80GB HBM3 (bench_gpu_cells) and NVIDIA H200 (bench_gpu_cells)" in out.read_text()
