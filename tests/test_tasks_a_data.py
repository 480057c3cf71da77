"""Paper A's tasks' data files (docs/design.md §6, §10): the real readers of the benchmarks' files (LongEval's
conversations, MDQA's documents, LCC's code buckets) and malformed files named by file, line and field."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_tasks_a import TOPICS_HEADER, TOPICS_QUESTION

from lengthx.data.fitting import count_tokens
from lengthx.data.jsonl import DataFormatError
from lengthx.tasks.base import Setting
from lengthx.tasks.code_completion import CodeCompletionTask
from lengthx.tasks.mdqa import MDQATask, generate_records, mdqa_prompt, read_records
from lengthx.tasks.topics import TopicsTask, read_conversations


def _write_jsonl(path: Path, rows: list, gz: bool = False) -> Path:
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def test_malformed_files_name_file_line_and_field(tmp_path):
    convs = _write_jsonl(tmp_path / "conversations.jsonl",
                         [{"topic": "a", "conversation": "USER: I would like to discuss the topic of a."},
                          {"topic": "b"}])
    with pytest.raises(DataFormatError, match=r"conversations\.jsonl, line 2: missing field 'conversation'"):
        read_conversations(convs)
    good = {"question": "q", "answers": ["x"], "ctxs": [{"title": "t", "text": "x", "isgold": True}]}
    bad = {"question": "q", "answers": ["x"], "ctxs": [{"title": "t", "text": "x", "isgold": True},
                                                       {"title": "u", "text": "y"}]}
    qa = _write_jsonl(tmp_path / "nq-open-10_total_documents_gold_at_0.jsonl.gz", [good, good, bad], gz=True)
    with pytest.raises(DataFormatError, match=r"gold_at_0\.jsonl\.gz, line 3: missing field 'ctxs\[1\]\.isgold'"):
        read_records(qa)
    no_q = _write_jsonl(tmp_path / "qa.jsonl", [{"answers": [], "ctxs": []}])
    with pytest.raises(DataFormatError, match=r"qa\.jsonl, line 1: missing field 'question'"):
        read_records(no_q)
    lcc = _write_jsonl(tmp_path / "lcc.jsonl", [{"context": "x = 1\n", "gt": "y = 2"}, "{not json"])
    with pytest.raises(DataFormatError, match=r"lcc\.jsonl, line 2: invalid JSON"):
        CodeCompletionTask(data_path=str(lcc)).rows()
    lcc = _write_jsonl(tmp_path / "lcc2.jsonl", [{"context": "x = 1\n"}])
    with pytest.raises(DataFormatError, match=r"lcc2\.jsonl, line 1: missing field 'gt'"):
        CodeCompletionTask(data_path=str(lcc)).rows()


def test_topics_read_longeval_conversations(tmp_path, byt5):
    rows = [{"topic": f"topic number {k}", "conversation": f"USER: I would like to discuss the topic of topic "
             f"number {k}. ASSISTANT: Sure, let us talk about it. " * 3} for k in range(6)]
    path = _write_jsonl(tmp_path / "conversations.jsonl", rows)
    task = TopicsTask.from_config(OmegaConf.create({"max_new_tokens": 50, "conversations_path": str(path)}))
    (ex,) = task.examples(Setting("3", 3, "topics"), byt5, 1, seed=0)
    assert ex.prompt.startswith(TOPICS_HEADER.format(n=3)) and ex.target == ex.meta["topics"][0]
    assert ex.target in {r["topic"] for r in rows}
    with pytest.raises(ValueError, match="without replacement"):
        task.examples(Setting("7", 7, "topics"), byt5, 1, seed=0)


def _longeval_conversation(topic: str) -> str:
    """A conversation in the layout of LongEval's conversations.jsonl (turns joined by " \\n ", no space at
    either end, the last USER turn closing the topic)."""
    return (f"USER: I would like to discuss the topic of {topic.lower()}. \n ASSISTANT: Sure, I'd be happy to "
            f"talk about that with you! \n USER: Great, this is the end of our discussion on the topic {topic}, "
            "let's talk about the next topic.")


def test_topics_prompt_concatenates_conversations_as_longeval(tmp_path, byt5):
    """LongEval's generator appends each conversation to the record with nothing between them and asks for
    "the first topic(s)"."""
    rows = [{"topic_id": k, "topic": f"The history of place {k}", "conversation": _longeval_conversation(
        f"The history of place {k}")} for k in range(4)]
    path = _write_jsonl(tmp_path / "conversations.jsonl", rows)
    task = TopicsTask(conversations_path=str(path))
    (ex,) = task.examples(Setting("3", 3, "topics"), byt5, 1, seed=0)
    texts = {r["topic"]: r["conversation"] for r in rows}
    chosen = [texts[t] for t in ex.meta["topics"]]
    assert ex.prompt == TOPICS_HEADER.format(n=3) + "".join(chosen) + TOPICS_QUESTION
    assert ex.prompt.count("let's talk about the next topic.USER: I would like to discuss the topic of") == 2
    assert "What is the first topic(s) we discussed?" in ex.prompt


def test_mdqa_reads_upstream_files_in_their_order(tmp_path, byt5):
    recs = generate_records(3, seed=1)

    def row(rec, gold_at):
        docs = list(rec.distractors[:9])
        docs.insert(gold_at, rec.gold)
        return {"question": rec.question, "answers": list(rec.answers),
                "ctxs": [{"title": d.title, "text": d.text, "isgold": d is rec.gold, "id": "x"} for d in docs]}

    _write_jsonl(tmp_path / "nq-open-10_total_documents_gold_at_4.jsonl.gz", [row(r, 4) for r in recs], gz=True)
    task = MDQATask.from_config(OmegaConf.create({"max_new_tokens": 100, "data_dir": str(tmp_path)}))
    ex = task.examples(Setting("10docs@4", 10, "docs"), byt5, 5, seed=0)
    assert len(ex) == 3  # every record when more are asked for
    for e, rec in zip(ex, recs, strict=True):
        assert e.prompt == mdqa_prompt(rec.question, rec.documents(10, 4))
    # an upstream file with more documents serves another (N, i) by the same construction
    ex = task.examples(Setting("5docs@0", 5, "docs"), byt5, 3, seed=0)
    assert [e.prompt for e in ex] == [mdqa_prompt(r.question, r.documents(5, 0)) for r in recs]
    assert ex[0].prompt.count("Document [") == 5 and recs[0].gold.text in ex[0].prompt.split("\n")[2]


def test_code_completion_reads_jsonl_buckets(tmp_path, byt5):
    rows = [{"context": "x = 1\n\n\n" + "y = 2\n" * k, "gt": "z = 3"} for k in (10, 100, 200, 300)]
    path = _write_jsonl(tmp_path / "lcc.jsonl", rows)
    task = CodeCompletionTask(data_path=str(path))
    ex = task.examples(Setting("1k", 1000, "bucket"), byt5, 10, seed=0)  # ByT5: 6 tokens per "y = 2\n"
    assert [e.actual_tokens for e in ex] == [count_tokens(byt5, collapse) for collapse in
                                             ["x = 1\n" + "y = 2\n" * k for k in (200, 300)]]
    assert all(1000 <= e.actual_tokens < 2000 and e.meta["bucket"] == [1000, 2000] for e in ex)
    ex = task.examples(Setting("500", 500, "tokens"), byt5, 10, seed=0)  # left-truncated to exactly 500
    assert len(ex) == 3 and all(e.actual_tokens == 500 for e in ex)
