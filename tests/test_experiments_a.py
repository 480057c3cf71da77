"""Paper A experiments: the dry runs list every cell of every paper-A table and the
counts equal the published tables'; the LongChat row runs in its chat template; ``--compare-paper`` and the
list of missing cells."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from transformers import LlamaConfig, LlamaForCausalLM

from lengthx.config import CONF_DIR, register_resolvers
from lengthx.core.runner import Runner
from lengthx.core.store import ResultsStore
from lengthx.data.tokenizers import train_bpe_tokenizer
from lengthx.models.generation import chat_prompt
from lengthx.report.tables.paper_a import CODE_KEY, TABLE3, TABLE4

ROOT = Path(__file__).resolve().parents[1]
PAPER_TABLES = ROOT / "lengthx" / "published" / "attention-alignment-tables"  # package data
LENGTHX = [sys.executable, "-m", "lengthx.cli"]
pytestmark = pytest.mark.usefixtures("one_thread")


def _listed(out: str) -> tuple[list[str], dict[str, int]]:
    """(cell keys, cells per table id) from a dry run's output."""
    cells = [line.split()[1] for line in out.splitlines() if line.startswith("cell ")]
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^  (\S+)\s+(\d+) / ", out, re.M)}
    return cells, counts


def _published_numbers(path: Path) -> int:
    """Numbers in a published grid CSV that are run cells: not in an "Avg." column, not an "Improvement"
    row, not a header row ("Models"/"Criteria" first, or no number at all)."""
    rows = list(csv.reader(open(path, encoding="utf-8")))

    def number(v: str) -> bool:
        return bool(re.fullmatch(r"[+-]?\d+(\.\d+)?|>1k", v.strip()))

    header = [r for r in rows if r[0] in ("Models", "Criteria")][-1]
    n = 0
    for row in rows:
        if row[0] in ("Models", "Criteria", "Improvement"):
            continue
        for j, v in enumerate(row[1:], start=1):
            if number(v) and header[j] != "Avg.":
                n += 1
    return n


@pytest.fixture(scope="module")
def paper_plan() -> str:
    """The output of ``lengthx plan profile=paper`` (the command's ``main``, run once in this process): composes
    every experiment of the paper profile, which makes each test that uses it slow."""
    from lengthx.cli import main

    out, err, sigterm = io.StringIO(), io.StringIO(), signal.getsignal(signal.SIGTERM)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            main(["plan", "profile=paper"])  # a failure exits (SystemExit): the fixture errors with it
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    return out.getvalue()


@pytest.mark.slow
def test_plan_lists_every_published_cell(paper_plan):
    cells, counts = _listed(paper_plan)
    assert len(cells) == len(set(cells))  # every cell listed once
    by_csv = {"table1.csv": ["aa_table1"], "table3.csv": ["aa_table3"], "table4.csv": ["aa_table4"],
              "table5.csv": ["aa_table5"], "table6_exact_match.csv": ["aa_table6_em"],
              "table6_edit_similarity.csv": ["aa_table6_es"], "table7.csv": ["aa_table7"],
              "table8.csv": ["aa_table8"], "table9.csv": ["aa_table9"], "table10.csv": ["aa_table10"],
              "table11.csv": ["aa_table11"], "table12.csv": ["aa_table12"], "table13.csv": ["aa_table13"],
              "table14.csv": ["aa_table14"], "table2.csv": []}
    assert set(by_csv) == {p.name for p in PAPER_TABLES.glob("*.csv")}  # every published table is accounted for
    assert _published_numbers(PAPER_TABLES / "table2.csv") == 0  # Table 2 lists PEs, no numbers
    for name, ids in by_csv.items():
        published = _published_numbers(PAPER_TABLES / name)
        for table_id in ids:
            assert counts[table_id] == published, (table_id, counts[table_id], published)
    # the published counts, spelled out: Tables 3, 4, 14 and 12 of paper A
    assert (counts["aa_table3"], counts["aa_table4"], counts["aa_table14"], counts["aa_table12"]) == (60, 208, 180, 75)
    # §5.4 reports code key retrieval in its text: four numbers (none, P_max, H, log), kept in the spec
    assert counts["aa_code_key"] == len(CODE_KEY.paper_values) == 4


@pytest.mark.slow
def test_plan_cells_are_the_papers_models_methods_and_settings(paper_plan):
    cells = [tuple(c.split("|")) for c in _listed(paper_plan)[0]]
    retrieval = {c for c in cells if c[2] in ("topics", "lines", "passkey") and c[1] != "stats"}
    flan = {f"flan-t5-{s}" for s in ("large", "xl", "xxl")}
    assert {c[0] for c in retrieval} == flan | {"longchat-13b-16k"}
    assert {c[1] for c in retrieval if c[0] == "longchat-13b-16k"} == {"none"}  # the baseline row only
    assert {c[1] for c in retrieval if c[0] in flan} == {"none", "pmax", "entropy", "log"}
    assert {c[3] for c in retrieval if c[2] == "lines"} == {"200", "300", "400", "500", "600", "680"}
    assert {c[0] for c in cells if c[2] == "lm"} == {"t5-large-lm", "t5-xl-lm", "t5-xxl-lm"}
    assert {c[1] for c in cells if c[2] == "code_completion"} == {"none", "pmax", "entropy", "log", "truncation"}
    assert {(c[0], c[3]) for c in cells if c[1] == "stats"} >= {("flan-t5-xl", "L_tr"), ("flan-t5-xl", "55k")}


@pytest.mark.slow
def test_hydra_dry_run_lists_the_sweep_and_writes_nothing(paper_plan, tmp_path, as_a_process):
    res = tmp_path / "res"
    p = as_a_process(["lengthx", "run", "-m", "experiment=aa_table3", "profile=paper", f"results_dir={res}",
                      "--dry-run"], cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    cells, counts = _listed(p.stdout)
    assert sorted(cells) == sorted(c for c in _listed(paper_plan)[0] if "|lm|" in c)
    assert counts["aa_table3"] == 60 and "Launching 12 jobs" in p.stdout + p.stderr
    assert not res.exists()  # no results, no Hydra output directory
    # model= on the command line narrows the sweep; the mini profile runs mini-t5 at scaled lengths
    p = as_a_process(["lengthx", "run", "-m", "experiment=aa_code_key", "model=mini-t5", "--dry-run"], cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert sorted(_listed(p.stdout)[0]) == [f"mini-t5|{m}|code_key|16k" for m in ("entropy", "log", "none", "pmax")]
    assert "(5333 tokens)" in p.stdout  # 16000 × L_tr 256 / 768


# ---- LongChat: the llama family in its chat template (Table 4's baseline row) --------------------------

# FastChat's vicuna_v1.1 conversation (system line, roles USER/ASSISTANT, separator " "), as LongEval prompts LongChat
VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                 "helpful, detailed, and polite answers to the user's questions.")
LONGCHAT_TEMPLATE = f"{VICUNA_SYSTEM} USER: {{prompt}} ASSISTANT:"


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory) -> str:
    """A 2-layer LlamaForCausalLM from a config with a byte-level BPE trained here (nothing downloaded)."""
    path = tmp_path_factory.mktemp("tiny-llama")
    texts = ["There is an important info hidden inside a lot of irrelevant text. The pass key is 12345. "
             "The grass is green. The sky is blue. USER: ASSISTANT: What is the pass key?"] * 20
    tok = train_bpe_tokenizer(texts, vocab_size=320)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
                      bos_token_id=0, eos_token_id=0, pad_token_id=0)
    LlamaForCausalLM(cfg).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_longchat_prompts_are_wrapped_in_its_chat_template(tiny_llama_dir, tmp_path):
    register_resolvers()
    overrides = ["model=longchat-13b-16k", f"model.path={tiny_llama_dir}", "model.l_tr=64", "task=passkey",
                 "method=none", "task.num_examples=2", "task.settings=[150]", f"results_dir={tmp_path}",
                 "batch_size=2", "device=cpu"]
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("run", overrides=overrides)
    assert cfg.model.chat_template == LONGCHAT_TEMPLATE  # conf/model/longchat-13b-16k.yaml
    runner = Runner(cfg)
    fed: list[torch.Tensor] = []
    runner.loaded.model.register_forward_pre_hook(
        lambda _m, args, kwargs: fed.append((kwargs.get("input_ids") if kwargs.get("input_ids") is not None
                                             else args[0]).clone()), with_kwargs=True)
    summary = runner.run()
    assert [s["status"] for s in summary] == ["ok"]
    tok = runner.loaded.tokenizer
    first = [tok.decode(row, skip_special_tokens=True) for row in fed[0]]  # the prompt step of generation
    raw = runner.task.examples(runner.settings()[0], tok, 2, int(cfg.task.seed))
    assert first == [f"{VICUNA_SYSTEM} USER: {e.prompt} ASSISTANT:" for e in raw]
    records = [json.loads(x) for x in next((tmp_path / "records").glob("*.jsonl")).read_text().splitlines()]
    for rec, e in zip(records, raw, strict=True):
        assert rec["requested_tokens"] == 150 and abs(e.actual_tokens - 150) <= 3  # the task prompt is fitted
        assert rec["actual_tokens"] == len(tok(f"{VICUNA_SYSTEM} USER: {e.prompt} ASSISTANT:")["input_ids"])
        assert rec["meta"]["chat_template"] == LONGCHAT_TEMPLATE


@pytest.mark.slow
def test_longchat_runs_through_the_cli(tiny_llama_dir, tmp_path, as_a_process):
    p = as_a_process(["lengthx", "run", "model=longchat-13b-16k", f"model.path={tiny_llama_dir}", "model.l_tr=64",
                      "task=lines", "method=none", "task.num_examples=2", "task.settings=[3]",
                      f"results_dir={tmp_path}"], cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    df = ResultsStore(tmp_path).read()
    assert set(df["model"]) == {"longchat-13b-16k"} and (df["status"] == "ok").all()


def test_chat_template_needs_one_prompt_slot():
    assert chat_prompt("USER: {prompt} ASSISTANT:", "hi", "m") == "USER: hi ASSISTANT:"
    with pytest.raises(ValueError, match=r"model.chat_template of model 'm' must contain '\{prompt\}'"):
        chat_prompt("USER: ASSISTANT:", "hi", "m")


# ---- tables: missing cells listed, the published value beside ours ------------------------------------


def _rows(model: str, task: str, metric: str, values: dict[str, float], method: str = "none") -> list[dict]:
    return [{"model": model, "method": method, "task": task, "setting": s, "metric": metric, "value": v,
             "status": "ok", "timestamp": "t"} for s, v in values.items()]


def test_missing_cells_are_listed():
    from lengthx.report.tables.render import render

    df = pd.DataFrame(_rows("mini-t5", "passkey", "accuracy", {"20k": 100.0, "55k": 90.0}))
    out = render(TABLE4, df)
    assert "mini-t5 / none / passkey: 30k, 40k, 50k" in out.missing
    assert "mini-t5 / none / topics: 5, 10, 15, 20, 25" in out.missing
    assert "mini-t5 / pmax / lines: 200, 300, 400, 500, 600, 680" in out.missing
    row = next(line for line in out.markdown.splitlines() if line.startswith("| **mini-T5**")).split("|")[1:-1]
    assert [c.strip() for c in row[12:18]] == ["100", "", "", "", "90", ""]  # Avg. empty: not every cell ran


def test_missing_cells_are_listed_with_the_markdown_labels():
    """The list printed after a Markdown table names rows as that table does; LaTeX stays in the .tex."""
    from lengthx.report.tables.paper_a import TABLE1
    from lengthx.report.tables.render import render

    df = pd.DataFrame(_rows("mini-t5", "passkey", "attn_pmax", {"L_tr": 0.31, "55k": 0.12}, method="stats"))
    out = render(TABLE1, df)
    entropy = [m for m in out.missing if m.startswith("mini-t5 / H / passkey: ")]
    assert entropy and "| H |" in out.markdown and "$H$" in out.latex
    assert any(m.startswith("mini-t5 / P_{max} / topics: ") for m in out.missing)
    assert not [m for m in out.missing if "$" in m or "\\" in m], out.missing


def test_compare_paper_sets_a_stand_in_beside_its_reference():
    from lengthx.report.tables.render import render

    df = pd.DataFrame(_rows("mini-t5", "lm", "perplexity", {"1024": 12.34, "2048": 2000.0}))
    out = render(TABLE3, df, compare_paper=True)
    row = next(line for line in out.markdown.splitlines() if line.startswith("| **mini-T5**")).split("|")[1:-1]
    # mini-t5 stands in for Flan-T5-XL, which Table 3 does not have: its T5 reference there is T5-XL-LM
    assert [c.strip() for c in row[1:4]] == ["12.3 (28.3)", ">1k (>1k)", "– (>1k)"]
    assert "mini-T5 is set beside the published T5-XL-LM" in out.markdown
    df = pd.DataFrame(_rows("mini-t5", "code_key", "accuracy", {"16k": 40.0}, method="pmax"))
    out = render(CODE_KEY, df, compare_paper=True)
    assert "40 (87)" in out.markdown  # §5.4's sentence, P_max row


def test_published_tables_ship_inside_the_package(monkeypatch, tmp_path):
    """--compare-paper and plan read the papers' numbers from package data, from any clone or install; a table
    missing there is an error naming it, for the renderer and for plan's counts alike."""
    import lengthx
    from lengthx.report.tables import TABLES, published
    from lengthx.report.tables.cells import published_cell_count
    from lengthx.report.tables.render import read_paper_table

    assert Path(str(published.PAPER_DIR)).resolve().is_relative_to(Path(lengthx.__file__).resolve().parent)
    for spec in TABLES.values():
        if spec.paper_csv:
            assert published.published_file(spec.paper_csv).is_file(), spec.id
            assert read_paper_table(spec) and published_cell_count(spec), spec.id
    monkeypatch.setattr(published, "PAPER_DIR", tmp_path)  # a broken install: an error, never a silent caption
    for read in (read_paper_table, published_cell_count):
        with pytest.raises(FileNotFoundError, match="attention-alignment-tables/table3.csv"):
            read(TABLE3)


def test_compare_paper_reads_the_package_whatever_the_environment(tmp_path):
    """No environment variable or sibling folder decides which published numbers a table shows."""
    res = tmp_path / "res"
    rows = [{**r, "cell": f"mini-t5|none|lm|{r['setting']}", "config_hash": "h", "n": 1}
            for r in _rows("mini-t5", "lm", "perplexity", {"1024": 12.34})]
    assert ResultsStore(res).append_rows(rows, rows[0]["cell"], "h")
    (tmp_path / "elsewhere").mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "LENGTHX_PAPER_DIR": str(tmp_path / "elsewhere")}
    p = subprocess.run([*LENGTHX, "tables", "--compare-paper", "--results-dir", str(res), "--format", "markdown"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "12.3 (28.3)" in (res / "tables" / "aa_table3_vs_paper.md").read_text()


def test_paper_b_runs_fill_their_method_row_at_their_length():
    """Paper B's cells carry the length a run was trained for (``chunk-0.25@2L_t``); in a table that looks
    methods up per column they fill the chunk-0.25 row at 2L_t, so plan counts Table 3's trained cells."""
    from lengthx.report.tables import TABLES
    from lengthx.report.tables.cells import filled_cells

    spec = TABLES["sb_table3"]
    runs = [("gpt2", "ootb", "segmented_ppl", "2L_t"), ("gpt2", "chunk-0.25@2L_t", "segmented_ppl", "2L_t"),
            ("gpt2", "chunk-0.25@4L_t", "segmented_ppl", "4L_t"), ("gpt2", "chunk-0.25@4L_t", "segmented_ppl", "2L_t")]
    filled = filled_cells(spec, runs)
    assert {(m, method) for m, method, _, _ in filled} == {("gpt2", "ootb"), ("gpt2", "chunk-0.25")}
    assert len(filled) == 3  # the 4L_t-trained run scored at 2L_t is not Table 3's chunk-0.25 cell at 2L_t


def test_plan_counts_paper_b_published_numbers_and_lists_its_training(capsys):
    """Paper B's tidy CSVs hold key columns (PE, method) and perplexities: only the perplexities are cells
    (Table 3: 14 rows x 2 lengths, RoPE full at 4L_t not reported = 27), and ``plan`` lists sb_* sweeps with the
    training they need, ``-m`` or not."""
    from lengthx.cli.run import plan_command
    from lengthx.report.tables import TABLES
    from lengthx.report.tables.cells import published_cell_count
    from lengthx.report.tables.published import published_file

    for table in ("sb_table2", "sb_table3", "sb_table4", "sb_table5"):
        spec = TABLES[table]
        with published_file(spec.paper_csv).open() as f:
            expected = sum(1 for row in csv.DictReader(f) for k, v in row.items() if k.startswith("ppl") and v)
        assert published_cell_count(spec) == expected, table
    assert published_cell_count(TABLES["sb_table3"]) == 27
    plan_command(["-m", "experiment=sb_table3", "profile=paper"])
    out = capsys.readouterr().out
    assert "train chunk-0.25-2x (to train; starts from ootb)" in out
    assert "cell gpt2|chunk-0.25@2L_t|segmented_ppl|2L_t" in out
    assert re.search(r"sb_table3\s+28 / 27", out)
