"""Checks of committed artifacts and docs (tests/artifacts/README.md): the lookup study's report
(docs/mini-t5-lookup.md) is current with its committed curves and snapshots."""

from __future__ import annotations

import re
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path

import pytest
from test_lookup_report import _script

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "results" / "mini-t5-lookup"
FIX = "run make mini-t5-lookup-report and commit its files with the curves"


@pytest.mark.skipif(not (STUDY / "curves.md").is_file(), reason="the lookup study has no report yet")
def test_the_curves_table_is_rendered_from_the_committed_curves():
    plot = _script("plot_lookup_curves")
    assert plot.table(plot.read(STUDY / "train")) == (STUDY / "curves.md").read_text(), FIX


def _table(report: str) -> str:
    if not (STUDY / report).is_file():
        pytest.skip("the lookup study has no report yet")
    return (STUDY / report).read_text()


def _named(text: str) -> list[Path]:
    """The snapshots a report's rows name, in order."""
    return [STUDY / "snapshots" / name for name in dict.fromkeys(re.findall(r"^\| (\w+/step-\d+) \|", text, re.M))]


def _rebuilt(text: str, report: Callable[..., tuple[str, int]], *args: object) -> None:
    """``report(*args, kept_only=True)`` (every result read from its kept file) gives ``text``."""
    try:
        again, _ = report(*args, kept_only=True)
    except LookupError as e:
        pytest.fail(f"{e}; {FIX}")
    assert again == text, FIX


@pytest.mark.parametrize("report, variant", [("errors.md", "*"), ("attention.md", "*"), ("late-rise.md", "pieces_more"),
                                             ("late-rise-benchmark.md", "scratch*")])
def test_each_snapshot_table_covers_every_committed_snapshot(report, variant):
    """errors.md and attention.md cover every snapshot, late-rise.md every snapshot of P+, late-rise-benchmark.md
    every snapshot of S and S+."""
    rows = {f"{p.parent.name}/{p.name}" for p in _named(_table(report)) if fnmatch(p.parent.name, variant)}
    snapshots = {f"{p.parent.name}/{p.name}" for p in (STUDY / "snapshots").glob(f"{variant}/step-*")
                 if (p / "README.md").is_file()}
    assert rows == snapshots, FIX


@pytest.mark.parametrize("report", ["errors.md", "late-rise.md", "late-rise-benchmark.md"])
def test_the_error_table_is_what_the_kept_answers_of_the_committed_snapshots_give(report):
    """errors.md (every snapshot), late-rise.md (P's last three, W's last and every snapshot of P+) and
    late-rise-benchmark.md (W's last, every snapshot of S and S+), the last two on 1,000 two-line records each,
    re-sorted from each snapshot's kept answers (results/mini-t5-lookup/answers/), which must be those
    of the committed weights and records: nothing generated, so the check is quick and exact."""
    text = _table(report)
    n, l_tr = map(int, re.search(r"greedy, (\d+) held-out .* at L_tr = (\d+) per row", text).groups())
    rows = re.findall(r"^\| \w+/step-\d+ \| ([\w-]+) \| (\d+) \|", text, re.M)
    forms = list(dict.fromkeys(form for form, _ in rows))
    counts = list(dict.fromkeys(int(k) for _, k in rows))
    _rebuilt(text, _script("lookup_errors").report, _named(text), counts, n, l_tr, "short", forms, STUDY / "answers")


def test_the_attention_table_is_what_the_kept_shares_of_the_committed_snapshots_give():
    """attention.md measured again from each snapshot's kept shares (results/mini-t5-lookup/shares/), which must be
    those of the committed weights and records: nothing measured, so the check is quick and exact."""
    text = _table("attention.md")
    n, l_tr = map(int, re.search(r"\((\d+) held-out records of two lines at L_tr = (\d+)", text).groups())
    forms = list(dict.fromkeys(re.findall(r"^\| \w+/step-\d+ \| ([\w-]+) \|", text, re.M)))
    _rebuilt(text, _script("lookup_attention").report, _named(text), n, l_tr, "short", forms, STUDY / "shares")
