"""scripts/studies/study_mini_t5_lines.py: the lookup stand-in's selection rule (docs/mini-t5-lookup.md, "Selection
rule" and "The GO check in the rule") over the study's variants, and the lines study's variants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_script

from lengthx.core.store import ResultsStore


def _script():
    return load_script("scripts/studies/study_mini_t5_lines.py")


def _snapshot(root: Path, variant: str, step: int, gate: bool, **final: float) -> None:
    d = root / "snapshots" / variant / f"step-{step:05d}"
    d.mkdir(parents=True)
    (d / "curve.json").write_text(json.dumps({"final": {f"{k.replace('_', '-')}@256": v for k, v in final.items()}}))
    status = "meets the retrieval bar" if gate else "does NOT meet the retrieval bar"
    (d / "README.md").write_text(f"# mini-t5 — {status} at L_tr (…)\n")


def _padded(root: Path, variant: str, step: int, **by_k: float) -> None:
    """The padded check's cells (scripts/studies/lookup_filled.py): task seed 600, 50 records, K lines at 256."""
    store = ResultsStore(root / "filled" / variant)
    for k, value in by_k.items():
        cell = f"step-{step:05d}|none|lines|256tokens-{k[1:]}lines"
        row = {"paper": "A", "table": "4", "model": f"step-{step:05d}", "method": "none", "task": "lines",
               "setting": f"256tokens-{k[1:]}lines", "metric": "accuracy", "value": value, "n": 50, "tau": 1.0,
               "L_tr": 256, "seed": 600, "status": "ok", "cell": cell, "config_hash": f"h{k}{step}-{value}",
               "timestamp": "2026-11-30T00:00:00", "data": "synthetic"}
        assert store.append_rows([row], cell, f"h{k}{step}-{value}")


def _go_check(root: Path, name: str, **by_k: float) -> None:
    """A GO check's cells: the mini profile's Flan-T5 row (handed to the shipped stand-in), 40 records, K lines."""
    store = ResultsStore(root / "go-check" / name)
    for k, value in by_k.items():
        cell = f"flan-t5-large|none|lines|256tokens-{k[1:]}lines"
        row = {"paper": "A", "table": "4", "model": "flan-t5-large", "method": "none", "task": "lines",
               "setting": f"256tokens-{k[1:]}lines", "metric": "accuracy", "value": value, "n": 40, "tau": 1.0,
               "L_tr": 256, "seed": 4242, "status": "ok", "cell": cell, "config_hash": f"g{k}-{value}",
               "timestamp": "2026-11-30T00:00:00", "data": "synthetic"}
        assert store.append_rows([row], cell, f"g{k}-{value}")


@pytest.fixture
def lookup(tmp_path, monkeypatch):
    s = _script()
    monkeypatch.setattr(s, "FILLED", tmp_path / "filled")
    monkeypatch.setattr(s, "GO_CHECK", tmp_path / "go-check")
    for variant in ("warm", "pieces", "pieces_more", "scratch"):
        _snapshot(tmp_path, variant, 20_000, gate=False)  # the four that ended their budgets without the gate
    return s, tmp_path


def test_the_rule_waits_for_an_earlier_variant_to_end_or_pass(lookup):
    s, root = lookup
    _snapshot(root, "scratch_more", 16_000, gate=False)
    _snapshot(root, "fill", 10_000, gate=True)  # F passes, but S+ comes first and may still pass
    picked, why = s.select(s.snapshots(root))
    assert picked is None and "scratch_more" in why and "step 16000" in why
    _snapshot(root, "scratch_more", 20_000, gate=False)
    picked, why = s.select(s.snapshots(root))
    assert picked.name == "fill/step-10000" and "earliest snapshot at its gate" in why


def test_a_gate_without_padded_records_needs_the_padded_check(lookup):
    """S+ at its gate picks only with ≥ 85% at 2, 11 and 12 lines padded to L_tr; short of it, S+ ends without a
    pick (its trainer stopped at the gate) and the rule goes on to F."""
    s, root = lookup
    _snapshot(root, "scratch_more", 18_000, gate=True)
    _snapshot(root, "fill", 10_000, gate=True)
    _padded(root, "scratch_more", 18_000, k2=96.0, k11=88.0, k12=80.0)  # 12 lines below 85%
    assert s.select(s.snapshots(root))[0].name == "fill/step-10000"
    _padded(root, "scratch_more", 18_000, k12=86.0)  # measured again (a newer row of the cell): at the bar
    picked, why = s.select(s.snapshots(root))
    assert picked.name == "scratch_more/step-18000" and "padded check" in why


def test_a_pick_that_misses_the_go_check_ends_its_variant(lookup):
    """S+ picked, shipped and short of 85% at 2 lines on its GO check: S+ ends without a pick and the rule goes on
    to F, whose own GO check is then owed; F's held check is named in the pick."""
    s, root = lookup
    _snapshot(root, "scratch_more", 20_000, gate=True)
    _padded(root, "scratch_more", 20_000, k2=90.0, k11=96.0, k12=94.0)
    _snapshot(root, "fill", 10_000, gate=True)
    picked, why = s.select(s.snapshots(root))
    assert picked.name == "scratch_more/step-20000" and "GO check is still to run" in why
    _go_check(root, "scratch_more/step-20000", k2=92.5)  # 2 lines alone: held so far, the check incomplete
    picked, why = s.select(s.snapshots(root))
    assert picked.name == "scratch_more/step-20000" and "GO check incomplete" in why
    _go_check(root, "scratch_more/step-20000", k2=82.5, k12=92.5)
    picked, why = s.select(s.snapshots(root))
    assert picked.name == "fill/step-10000" and "GO check is still to run" in why
    assert "missed (2 lines 82.5% of 40" in s.card_rows([picked, s.snapshots(root)[-2]])[-1]
    _go_check(root, "fill/step-10000", k2=97.5, k12=85.0)
    picked, why = s.select(s.snapshots(root))
    assert picked.name == "fill/step-10000" and "GO check held (2 lines 97.5% of 40, 12 lines 85.0% of 40)" in why
    _go_check(root, "fill/step-10000", k12=80.0)
    picked, why = s.select(s.snapshots(root))
    assert picked is None and why.startswith("NO-GO") and "GO check" in why


def test_no_pick_after_every_budget_is_a_no_go(lookup):
    s, root = lookup
    for variant in ("scratch_more", "fill"):
        _snapshot(root, variant, 20_000, gate=False)
    picked, why = s.select(s.snapshots(root))
    assert picked is None and why.startswith("NO-GO")


def test_a_matched_count_is_measured_past_l_tr_only_where_its_padded_records_are_handled(lookup, capsys):
    """The matched-count variants speak through the padded sets (F's card has them; another variant's snapshot
    through its padded check), the benchmark's records through lines@256."""
    import argparse

    s, root = lookup
    _snapshot(root, "fill", 10_000, gate=True, lines=92.0, lines_fill_n2=98.0, lines_fill_n6=84.0, lines_fill_n11=94.0)
    snap = s.snapshots(root)[-1]
    args = argparse.Namespace(results=str(root / "study"), lengths=[1024], variants=["lines K=6"], examples=2,
                              methods=["none", "pmax"], calibration=1, device="cpu")
    s.study_cells.measure(s.DESIGN, snap, args)  # would load the (absent) model were the cell not skipped
    assert "lines K=6 not measured past L_tr (card 84% < 90% at L_tr)" in capsys.readouterr().out
    assert [v.label(1024) for v in s.VARIANTS if v.task == "lines"] == [
        "1024tokens-2lines", "1024tokens-6lines", "1024tokens-11lines", "1024tokens"]
    _snapshot(root, "scratch_more", 18_000, gate=True)
    _padded(root, "scratch_more", 18_000, k11=91.0)
    other = next(x for x in s.snapshots(root) if x.variant == "scratch_more")
    assert other.held_out("lines-fill-n11") == 91.0 and other.held_out("lines-fill-n2") == 0.0


def test_mdqa_and_code_key_are_measured_at_l_tr_only(lookup, capsys):
    """The other key tasks: on the same snapshot at L_tr, every method, and never past it (no card set speaks for
    them, docs/mini-t5-lookup.md, "The lines study, fixed")."""
    import argparse

    s, root = lookup
    _snapshot(root, "fill", 10_000, gate=True, lines=92.0)
    snap = s.snapshots(root)[-1]
    args = argparse.Namespace(results=str(root / "study"), lengths=[256, 1024], variants=["mdqa", "code key"],
                              examples=2, methods=["none", "log", "pmax", "entropy"], calibration=1, device="cpu")
    plan = s.study_cells.planned(s.DESIGN, snap, args)
    assert [(c.task.name, c.method.name, list(c.task.settings)) for c in plan] == [
        (t, m, [256]) for t in ("mdqa", "code_key") for m in ("none", "log", "pmax", "entropy")]
    assert {c.model.path for c in plan} == {str(snap.path)} and {c.task.unit for c in plan} == {"tokens"}
    assert "card" not in capsys.readouterr().out  # no card set measures them: none is claimed
