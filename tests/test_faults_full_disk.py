"""Fault injection: short writes on a full disk (docs/results.md). A row the disk cut short is never a row, a short
write the disk then takes is completed, and a run on a full disk reports no ``ok`` cell.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager

import pytest
from test_faults import _args

from lengthx.core.store import ResultsStore

pytestmark = pytest.mark.usefixtures("one_thread")


def _row(cell: str, **kw) -> dict:
    return dict(paper="A", table="4", model="m", method="none", task="passkey", setting=cell.split("|")[-1],
                metric="accuracy", value=50.0, n=2, status="ok", cell=cell, config_hash="h", **kw)


@contextmanager
def _full_disk(monkeypatch, writes_before_full: int = 0):
    """``os.write`` on a disk that fills up: a short write of half the bytes, then ENOSPC."""
    real, calls = os.write, []

    def write(fd: int, data) -> int:
        calls.append(len(data))
        if len(calls) <= writes_before_full:
            return real(fd, data)
        if len(calls) == writes_before_full + 1:
            return real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)
    yield calls
    monkeypatch.setattr(os, "write", real)


def test_a_short_write_is_never_a_row(tmp_path, monkeypatch):
    store = ResultsStore(tmp_path)
    store.append_rows([_row("m|none|passkey|20k")], "m|none|passkey|20k", "h")
    store.append_record("m|none|passkey|20k", {"id": "a", "scores": {"accuracy": 1.0}})
    csv, records = store.csv_path.read_bytes(), store.records_path("m|none|passkey|20k").read_bytes()
    errors = []
    for write in (lambda: store.append_rows([_row("m|none|passkey|30k")], "m|none|passkey|30k", "h"),
                  lambda: store.append_record("m|none|passkey|20k", {"id": "b", "scores": {"accuracy": 0.0}})):
        with _full_disk(monkeypatch):
            try:
                write()
            except Exception as err:  # noqa: BLE001 - the type is the store's; what matters is that it raised
                errors.append(str(err))
    assert len(errors) == 2 and str(store.csv_path) in errors[0] and "No space left" in errors[0]
    assert store.csv_path.read_bytes() == csv and store.records_path("m|none|passkey|20k").read_bytes() == records
    assert not store.is_done("m|none|passkey|30k", "h") and list(store.load_records("m|none|passkey|20k")) == ["a"]


def test_a_short_write_that_the_disk_then_takes_is_completed(tmp_path, monkeypatch):
    real, calls = os.write, []

    def short_once(fd: int, data) -> int:  # POSIX allows a short write; the rest must follow
        calls.append(len(data))
        return real(fd, bytes(data[: len(data) // 2])) if len(calls) == 1 else real(fd, data)

    store = ResultsStore(tmp_path)
    monkeypatch.setattr(os, "write", short_once)
    assert store.append_rows([_row("m|none|passkey|20k")], "m|none|passkey|20k", "h")
    monkeypatch.setattr(os, "write", real)
    assert len(calls) == 2 and store.read()["value"].tolist() == [50.0]
    assert store.csv_path.read_bytes().endswith(b"\n") and store.is_done("m|none|passkey|20k", "h")


def test_a_run_on_a_full_disk_reports_no_ok_cell(tiny_model_dir, tmp_path, monkeypatch):
    from lengthx.config import compose
    from lengthx.core.runner import Runner

    cfg = compose(_args(tiny_model_dir, tmp_path / "res", settings="[320]")[1:])
    runner = Runner(cfg)
    summary, raised = None, None
    with _full_disk(monkeypatch):
        try:
            summary = runner.run()
        except Exception as err:  # noqa: BLE001
            raised = err
    assert summary is None and "No space left" in str(raised)
    store = ResultsStore(tmp_path / "res")
    assert store.read().empty
    assert not any(p.stat().st_size for p in store.records_dir.glob("*.jsonl"))
