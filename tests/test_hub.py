"""The one hub loader (``lengthx.data.hub``) behind LCC, PG19 and arXiv: actionable errors, field checks."""

from __future__ import annotations

import datasets
import pytest

from lengthx.data.hub import load_hub_dataset
from lengthx.data.jsonl import DataFormatError
from lengthx.tasks.code_completion import load_lcc_hf
from lengthx.tasks.lm import load_hf_documents


@pytest.fixture
def fake_hub(monkeypatch):
    """``datasets.load_dataset`` answering from a dict of name → columns; any other name fails to load."""
    calls = []
    tables = {"org/lcc": {"context": ["a = 1\n", "b = 2\n"], "gt": ["c = 3", "d = 4"]},
              "org/books": {"text": ["one", "two"], "short_book_title": ["A", "B"]}}

    def load_dataset(name, config=None, split=None, **kwargs):
        calls.append((name, config, split, kwargs))
        if name not in tables:
            raise ConnectionError("offline")
        return datasets.Dataset.from_dict(tables[name])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_loads_and_passes_config_and_kwargs(fake_hub):
    ds = load_hub_dataset("org/books", "test", ("text",), config="v1", revision="main")
    assert ds["text"] == ["one", "two"]
    assert fake_hub == [("org/books", "v1", "test", {"revision": "main"})]


def test_failure_names_the_dataset_and_the_offline_alternative(fake_hub):
    with pytest.raises(RuntimeError, match=r"'org/none' \(split 'test'\).*ConnectionError: offline\. use stdlib"):
        load_hub_dataset("org/none", "test", hint="use stdlib")


def test_missing_field_names_the_columns(fake_hub):
    with pytest.raises(DataFormatError, match=r"missing field 'article'; columns are \['text', 'short_book_title'\]"):
        load_hub_dataset("org/books", "train", ("text", "article"))


def test_task_loaders_read_through_it(fake_hub):
    rows = load_lcc_hf("org/lcc", "test")
    assert [(r.context, r.gt, r.source) for r in rows][1] == ("b = 2\n", "d = 4", "org/lcc:test:1")
    assert load_hf_documents("org/books", "test") == [("A", "one"), ("B", "two")]
    with pytest.raises(DataFormatError, match="missing field 'context'"):
        load_lcc_hf("org/books", "test")
    with pytest.raises(RuntimeError, match="task.source=stdlib"):
        load_hf_documents("org/none")
