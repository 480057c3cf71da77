"""The paper profile reads the papers' data or stops before any model loads; every row names its data, and
tables built from a stand-in say so (docs/design.md §7, §8)."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from lengthx.cli.validate import ConfigError, validate_run_config
from lengthx.core.store import COLUMNS, LEGACY_COLUMNS, ResultsStore
from lengthx.models.minis import compose_run
from lengthx.report.tables.paper_a import TABLE4, TABLE5

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_lengthx(as_a_process):
    """``lengthx <args>`` run in directory ``cwd`` as its own process would run it, in this one (conftest
    ``as_a_process``): these tests check its exit status, its lines and the files it writes."""
    return lambda args, cwd: as_a_process(["lengthx", *args], cwd=cwd)


def _conversations(path: Path, n: int = 6) -> Path:
    """A conversations.jsonl in LongEval's layout: topic_id, topic, conversation (turns joined by " \\n ")."""
    rows = [{"topic_id": k + 1, "topic": f"The history of place {k}",
             "conversation": f"USER: I would like to discuss the topic of the history of place {k}. \n ASSISTANT: "
                             f"Sure, I'd be happy to talk about that with you! \n USER: Great, this is the end of our "
                             f"discussion on the topic The history of place {k}, let's talk about the next topic."}
            for k in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _nq_open(folder: Path, n_docs: int = 10, gold_at: int = 0, records: int = 3) -> Path:
    """An upstream Lost-in-the-Middle file (question, answers, ctxs with title/text/isgold), gzipped."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"nq-open-{n_docs}_total_documents_gold_at_{gold_at}.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for q in range(records):
            ctxs = [{"id": str(d), "title": f"Doc {d}", "text": f"Passage {d} mentions nothing useful.",
                     "score": "1.0", "hasanswer": False, "isgold": False} for d in range(n_docs - 1)]
            ctxs.insert(gold_at, {"id": "g", "title": "Gold", "text": f"The answer to question {q} is blue{q}.",
                                  "score": "1.0", "hasanswer": True, "isgold": True})
            fh.write(json.dumps({"question": f"what is the answer to question {q}", "answers": [f"blue{q}"],
                                 "ctxs": ctxs, "nq_annotated_gold": {}}) + "\n")
    return path


# ---- validation: no silent stand-in in the paper profile ----------------------------------------------------


def test_paper_topics_and_mdqa_without_data_stop_before_any_model_loads(tmp_path, run_lengthx):
    for task, missing, source in (("topics", "conversations.jsonl", "github.com/DachengLi1/LongChat"),
                                  ("mdqa", "nq-open-10_total_documents_gold_at_0.jsonl.gz",
                                   "github.com/nelson-liu/lost-in-the-middle")):
        res = tmp_path / f"res-{task}"
        p = run_lengthx(["run", "profile=paper", "model=flan-t5-xl", f"task={task}", f"results_dir={res}"], tmp_path)
        assert p.returncode == 2, p.stderr[-2000:]
        line = p.stderr.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in line
        assert missing in line and source in line and "Fix:" in line
        assert "not available" not in line  # the data is checked before the model (not downloadable here)
        assert not res.exists()  # nothing written


def test_paper_data_problems_name_the_key_and_the_file(tmp_path):
    base = ["profile=paper", "model=flan-t5-xl", f"results_dir={tmp_path / 'r'}"]
    cases = [
        (["task=topics", f"task.conversations_path={tmp_path / 'nope.jsonl'}"], "task.conversations_path="),
        (["task=mdqa", f"task.data_dir={tmp_path / 'none'}"], "task.data_dir="),
        (["task=mdqa", f"task.data_dir={_nq_open(tmp_path / 'qa', 10, 0).parent}", "task.only=[20docs@4]"],
         "nq-open-20_total_documents_gold_at_4.jsonl.gz"),
        (["task=code_completion", "task.source=jsonl", f"task.data_path={tmp_path / 'lcc.jsonl'}"], "lcc.jsonl"),
        (["task=lm", f"task.text_path={tmp_path / 'books'}"], "task.text_path="),
    ]
    for overrides, named in cases:
        with pytest.raises(ConfigError, match="Fix:") as err:
            validate_run_config(compose_run(base + overrides))
        assert named in str(err.value), (overrides, str(err.value))
    # the mini profile's default stays the generated stand-in; no data needed
    validate_run_config(compose_run(["task=topics", f"results_dir={tmp_path / 'm'}"]))
    validate_run_config(compose_run(["task=mdqa", f"results_dir={tmp_path / 'm'}"]))


@pytest.mark.slow
def test_paper_topics_and_mdqa_run_on_files_in_the_upstream_format(tiny_model_dir, tmp_path, run_lengthx):
    """With real-format files the paper profile passes validation and runs (a tiny T5 built from a config);
    each row names the file it read, by name and hash."""
    convs = _conversations(tmp_path / "conversations.jsonl")
    qa = _nq_open(tmp_path / "qa_data" / "10_total_documents", 10, 4)  # upstream's folder layout
    common = ["profile=paper", "model=flan-t5-xl", f"model.path={tiny_model_dir}", "method=none",
              "task.num_examples=1", "task.max_new_tokens=4", f"results_dir={tmp_path / 'res'}", "device=cpu"]
    runs = (["task=topics", f"task.conversations_path={convs}", "task.only=['5']"],
            ["task=mdqa", f"task.data_dir={tmp_path / 'qa_data'}", "task.only=[10docs@4]"])
    for extra in runs:
        p = run_lengthx(["run", *common, *extra], tmp_path)
        assert p.returncode == 0, p.stderr[-3000:]
    df = ResultsStore(tmp_path / "res").read()
    assert (df["status"] == "ok").all()
    data = dict(zip(df["task"], df["data"], strict=False))
    assert data["topics"].startswith("conversations.jsonl@") and len(data["topics"].split("@")[1]) == 8
    assert data["mdqa"].startswith(qa.name + "@")


# ---- rows name their data; old results files read as unknown ------------------------------------------------


def test_rows_name_their_data(tiny_model_dir, tmp_path):
    from lengthx.core.runner import Runner
    from lengthx.tasks.base import Setting

    convs = _conversations(tmp_path / "conversations.jsonl")
    cfg = compose_run(["task=topics", f"model.path={tiny_model_dir}", f"results_dir={tmp_path}"])
    runner = Runner(cfg)
    assert runner.data_source(Setting("5", 5, "topics")) == "generated"
    cfg = compose_run(["task=topics", f"model.path={tiny_model_dir}", f"results_dir={tmp_path}",
                       f"task.conversations_path={convs}"])
    label = Runner(cfg).data_source(Setting("5", 5, "topics"))
    assert label.startswith("conversations.jsonl@") and label != "conversations.jsonl@"
    for task, want in (("passkey", "synthetic"), ("lines", "synthetic"), ("mdqa", "generated")):
        cfg = compose_run([f"task={task}", f"model.path={tiny_model_dir}", f"results_dir={tmp_path}"])
        runner = Runner(cfg)
        assert runner.row_fields(runner.cells()[0][0], "h", 0.0)["data"] == want
    cfg = compose_run(["task=code_completion", f"model.path={tiny_model_dir}", f"results_dir={tmp_path}"])
    assert Runner(cfg).data_source(Setting("1k", 100, "tokens")).startswith("stdlib-py")


def test_a_results_file_without_the_data_column_reads_as_unknown_and_gains_it_on_the_next_row(tmp_path):
    """A results file written before rows named their data (the header results/mini had) reads with ``data``
    unknown; reading never rewrites it, and the first row of the current schema rewrites it whole (one rename)
    with the current header, the older rows' ``data`` empty."""
    committed = ROOT / "results" / "mini" / "results.csv"
    with committed.open(newline="") as f:  # the rows written before the column, under the older header
        legacy = [LEGACY_COLUMNS] + [r[:len(LEGACY_COLUMNS)] for r in list(csv.reader(f))[1:]
                                     if len(r) == len(LEGACY_COLUMNS) or r[-1] == ""]
    with (tmp_path / "results.csv").open("w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(legacy)
    before = (tmp_path / "results.csv").read_bytes()
    store = ResultsStore(tmp_path)
    store.check()
    df = store.read()
    assert len(df) == len(legacy) - 1 > 100 and "data" in df.columns and set(df["data"]) == {""}
    assert (tmp_path / "results.csv").read_bytes() == before  # reading never rewrites
    row = {"paper": "A", "table": "4", "model": "m", "method": "none", "task": "topics", "setting": "5",
           "metric": "accuracy", "value": 1.0, "n": 1, "status": "ok", "cell": "m|none|topics|5",
           "config_hash": "h", "timestamp": "9999", "data": "generated"}
    assert store.append_rows([row], row["cell"], "h")
    after = (tmp_path / "results.csv").read_bytes().splitlines(keepends=True)
    assert after[0].decode().strip() == ",".join(COLUMNS)
    assert [line.rstrip(b"\n") for line in after[1:-1]] == [line.rstrip(b"\n") + b"," for line in
                                                             before.splitlines(keepends=True)[1:]]
    df2 = store.read()
    assert len(df2) == len(df) + 1 and df2["data"].iloc[-1] == "generated" and set(df2["data"].iloc[:-1]) == {""}
    assert store.is_done(row["cell"], "h") and store.is_done(df["cell"].iloc[0], df["config_hash"].iloc[0])
    assert len(pd.read_csv(tmp_path / "results.csv")) == len(df2)


# ---- tables say when their rows come from a stand-in -----------------------------------------------------------


def _rows(task: str, settings: list[str], data: str) -> list[dict]:
    return [{"model": "mini-t5", "method": "none", "task": task, "setting": s, "metric": "accuracy", "value": 1.0,
             "status": "ok", "timestamp": "t", "data": data} for s in settings]


def test_tables_built_from_generated_data_say_so():
    from lengthx.report.tables.render import render

    df = pd.DataFrame(_rows("mdqa", ["10docs@0", "10docs@4"], "generated"))
    md = render(TABLE5, df).markdown
    assert "Data: the mdqa rows are built from a QA set generated" in md and "nq-open-" in md
    real = pd.DataFrame(_rows("mdqa", ["10docs@0"], "nq-open-10_total_documents_gold_at_0.jsonl.gz@0123abcd"))
    assert "Data:" not in render(TABLE5, real).markdown
    legacy = pd.DataFrame(_rows("mdqa", ["10docs@0"], ""))
    assert "do not name their data" in render(TABLE5, legacy).markdown
    topics = render(TABLE4, pd.DataFrame(_rows("topics", ["5"], "conversations.jsonl@0123abcd")))
    assert "upstream LongEval asked a GPT model to judge it" in topics.markdown and "GPT" in topics.latex
    assert "Data:" not in topics.markdown


def test_numeric_setting_labels_pass_validation(tmp_path):
    """Hydra reads ``task.only=[5,25]`` (topics' labels) as numbers; the Makefile's recipe passes them so."""
    cfg = compose_run(["task=topics", "task.only=[5,25]", f"results_dir={tmp_path / 'm'}"])
    validate_run_config(cfg)
    from lengthx.tasks import resolve_settings

    assert [s.label for s in resolve_settings(cfg.task, "mini", int(cfg.model.l_tr))] == ["5", "25"]


def test_dry_run_names_the_data_each_job_needs_and_whether_it_is_there(tmp_path, run_lengthx):
    """A paper-profile dry run lists its cells and says, per job, which data the run reads and whether it is there."""
    base = ["run", "profile=paper", "model=flan-t5-xl", f"results_dir={tmp_path / 'r'}", "--dry-run"]
    p = run_lengthx([*base, "task=topics"], tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("data:")]
    assert line.startswith("data: MISSING") and "conversations.jsonl" in line and "Fix:" in line
    assert "cell flan-t5-xl|none|topics|5" in p.stdout
    convs = _conversations(tmp_path / "conversations.jsonl")
    p = run_lengthx([*base, "task=topics", f"task.conversations_path={convs}"], tmp_path)
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("data:")]
    assert line.startswith("data: conversations.jsonl@") and line.endswith("(there)")
    p = run_lengthx([*base, "task=lines"], tmp_path)
    assert "data: synthetic (drawn as the benchmark draws it)" in p.stdout
    assert not (tmp_path / "r").exists()
