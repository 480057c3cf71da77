"""A model and an input that cannot meet, and inputs of the wrong kind, stop before any work with one line naming
the limit or the argument and the fix (docs/results.md, "Errors"; docs/api.md): GPT-2's learned positions end
at ``n_positions``; the API takes texts or token ids, a whole ``row_stride``, and loaded weights."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch
from conftest import byte_tokenizer, tiny_gpt2, tiny_t5

import lengthx
from lengthx.core.runner import Runner
from lengthx.models.minis import compose_run

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_gpt2_run_past_its_positions_stops_before_any_cell(tmp_path):
    """``lengthx run model=gpt2 task=passkey`` (the mini profile's GPT-2 reads 128 positions; passkey's
    settings are over a thousand tokens) exits 2 with one line naming the limit and the fix, and no cell runs
    (before: an ``IndexError`` per cell, ``error`` rows, exit 0)."""
    env = {**{k: v for k, v in os.environ.items() if k != "LENGTHX_DEBUG"}, "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    results = tmp_path / "res"
    p = subprocess.run([sys.executable, "-m", "lengthx.cli", "run", "model=gpt2", "task=passkey",
                        f"results_dir={results}", "task.num_examples=1"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 2, (p.stdout + p.stderr)[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("lengthx")]
    assert len(lines) == 1 and "at most 128 positions" in lines[0] and "Fix:" in lines[0], p.stderr[-3000:]
    assert "Traceback" not in p.stderr and not (results / "results.csv").exists()


def test_settings_far_past_the_papers_are_named_once(tmp_path, caplog):
    """``task.settings=[20000]`` meant as the paper's 20k characters runs 20,000 tokens: 78x the mini's L_tr of
    256; one warning gives the ratio and the unit to add."""
    from lengthx.core.length_limits import check_lengths

    runner = Runner(compose_run(["task=passkey", "task.settings=[20000]", f"results_dir={tmp_path}"]))
    with caplog.at_level(logging.WARNING):
        check_lengths(runner)
    (warning,) = [r.getMessage() for r in caplog.records if "task.settings" in r.getMessage()]
    assert "78x" in warning and "task.unit=chars" in warning


def test_the_api_refuses_an_input_past_gpt2_positions():
    model = tiny_gpt2(attn="sdpa")  # 64 positions
    with pytest.raises(ValueError, match="input 0 is 100 tokens, but the model reads at most 64 positions"):
        lengthx.dispersal(model, byte_tokenizer(), list(range(3, 103)))
    assert lengthx.dispersal(model, byte_tokenizer(), list(range(3, 60))).tokens == 57


@pytest.mark.parametrize("inputs,match", [
    ([[]], "input 0 is \\[\\]: pass a text, or a non-empty list of token ids"),
    (["text", ""], "input 1 is an empty text"),
    (torch.zeros(2, 0, dtype=torch.long), "input 0 is a tensor of shape \\(0,\\)"),
    ([[1.5, 2.0]], "non-empty list of token ids"),
])
def test_the_api_names_an_input_that_is_not_text_or_token_ids(inputs, match):
    with pytest.raises(ValueError, match=match):
        lengthx.dispersal(tiny_t5(attn="sdpa", vocab_size=384), byte_tokenizer(), inputs)


def test_the_api_names_an_example_passed_for_a_prompt():
    tokenizer = byte_tokenizer()
    (example,) = lengthx.task_examples("passkey", tokenizer, 300)
    model = tiny_t5(attn="sdpa", vocab_size=384)
    for given in (example, [example]):
        with pytest.raises(ValueError, match="is a lengthx Example, not a text: pass its prompt"):
            lengthx.dispersal(model, tokenizer, given)
    assert lengthx.dispersal(model, tokenizer, example.prompt).tokens == example.actual_tokens


@pytest.mark.parametrize("row_stride", ["8", 0, 2.5])
def test_the_api_names_a_row_stride_that_is_not_a_whole_number(row_stride):
    with pytest.raises(ValueError, match="row_stride must be a whole number of at least 1"):
        lengthx.dispersal(tiny_t5(attn="sdpa"), byte_tokenizer(), [3, 4, 5], row_stride=row_stride)


def test_the_api_names_a_model_whose_weights_are_not_loaded():
    with torch.device("meta"):
        model = tiny_gpt2(attn="sdpa")
    with pytest.raises(ValueError, match="on the meta device"):
        lengthx.dispersal(model, byte_tokenizer(), [3, 4, 5])


def test_a_longeval_file_whose_cases_hold_another_topic_count_is_named(tmp_path):
    """A ``5_topics.jsonl`` whose cases hold 2 topics was evaluated and reported as ``5topics``; now the check
    before any work names the file, the line and both counts."""
    import json

    from omegaconf import OmegaConf

    from lengthx.tasks.base import Setting
    from lengthx.tasks.topics import TopicsTask

    case = {"prompt": "Below is a record … What is the first topic we discussed?", "topics": ["a", "b"]}
    (tmp_path / "5_topics.jsonl").write_text(json.dumps(case) + "\n")
    cfg = OmegaConf.create({"testcases_dir": str(tmp_path), "conversations_path": None})
    problem = TopicsTask.data_problem(cfg, "paper", [Setting("5", 5, "topics")])
    assert problem is not None and "5_topics.jsonl, line 1: a case of 2 topics in the file of 5 topics" in problem
    with pytest.raises(ValueError, match="a case of 2 topics"):
        TopicsTask(testcases_dir=str(tmp_path)).examples(Setting("5", 5, "topics"), None, 1, seed=0)
