"""Checks of committed artifacts and docs (tests/artifacts/README.md): they fail when the committed results,
checkpoints or docs are out of step with the code, not when the code breaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_mini_t5_counts_study import STUDY, _script

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (STUDY / "study.md").is_file(), reason="the study has not been rendered yet")
def test_study_md_is_rendered_from_the_committed_records():
    s = _script()
    text, data = s.study(STUDY, list(s.DEFAULT_LENGTHS))
    assert text == (STUDY / "study.md").read_text()
    picked = s.select(s.snapshots(STUDY))
    assert data["picked"] == (picked.name if picked else None)


@pytest.mark.skipif(not (STUDY / "headline.md").is_file(), reason="the study has not been rendered yet")
def test_headline_md_is_rendered_from_the_committed_records():
    s = _script()
    _, data = s.study(STUDY, list(s.DEFAULT_LENGTHS))
    text = (STUDY / "headline.md").read_text()
    assert s.headline(data["snapshots"]) == text
    assert not any(f"| {x['snapshot']} |" in text for x in data["snapshots"] if not x["meets_bar"])


def test_the_demo_slice_is_the_shipped_snapshots_largest_tau_1_fall_at_a_handled_count():
    """make demo's DEMO_K and DEMO_LENGTH follow its rule (Makefile): among K = 1, 3, 5 at 4x and 10x L_tr on the
    shipped snapshot, the largest fall of τ = 1 against L_tr at the same count, chosen on τ = 1 alone."""
    import re

    make = (ROOT / "Makefile").read_text()
    k = int(re.search(r"^DEMO_K \?= (\d+)$", make, re.M)[1])
    length = int(re.search(r"^DEMO_LENGTH \?= (\d+)$", make, re.M)[1])
    data = json.loads((STUDY / "study.json").read_text())
    shipped = next(x for x in data["snapshots"] if x["snapshot"] == data["picked"])
    falls = {(kk, int(n)): cell["vs_l_tr"][0] for kk in (1, 3, 5)
             for n, cell in shipped["variants"][f"topics K={kk}"].items() if int(n) in (1024, 2560)}
    assert len(falls) == 6 and min(falls, key=falls.get) == (k, length)


def test_owed_lists_each_resolved_paper_rule_difference_not_yet_replicated():
    """A paper rule whose Δ excludes 0 past L_tr, a gain or a cost, is owed a replication at task seed 7 until that
    rule is measured there; L_tr, the extension, τ = 1 and unresolved differences owe none."""
    s = _script()

    def cell(**deltas):
        return {"methods": {"none": {}, **{m: {"delta": list(d)} for m, d in deltas.items()}}}

    up, zero, down = (10.0, 2.0, 18.0), (3.0, -4.0, 9.0), (-9.0, -15.0, -1.0)
    summary = {"snapshot": "seed0/step-03200", "variants": {
        "topics K=3": {"256": cell(log=up), "2560": cell(log=up, pmax=zero, entropy=down, **{"pmax-bisect-min0.2": up}),
                       "7424": cell(log=up, pmax=up, entropy=up)}},
        "replication": {"topics K=3": {"7424": {"methods": {"none": {}, "log": {}}}}}}
    assert s.owed([summary]) == ["seed0/step-03200:topicsK=3:2560:log", "seed0/step-03200:topicsK=3:2560:entropy",
                                    "seed0/step-03200:topicsK=3:7424:pmax", "seed0/step-03200:topicsK=3:7424:entropy"]
