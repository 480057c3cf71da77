"""``lengthx figures`` (docs/design.md §7): every figure its inputs allow, written byte for byte the same when
nothing changed, so a rerun leaves committed figures alone."""

from __future__ import annotations

import shutil
from pathlib import Path

from lengthx.cli.figures import figures_main

RESULTS = Path(__file__).resolve().parents[1] / "results" / "mini"


def _results(tmp_path: Path) -> Path:
    """The statistics side files of two models whose names share a prefix (mini-t5, mini-t5-lm)."""
    root = tmp_path / "res"
    (root / "stats").mkdir(parents=True)
    for name in ("mini-t5__passkey.json", "mini-t5-lm__lm.json"):
        shutil.copy(RESULTS / "stats" / name, root / "stats" / name)
    return root


def test_every_model_gets_its_figure_1(tmp_path):
    root = _results(tmp_path)
    figures_main(["--results-dir", str(root), "--out", str(tmp_path / "out")])
    for model in ("mini-t5", "mini-t5-lm"):  # mini-t5-lm's file sorts first; mini-t5's figure is still drawn
        assert (tmp_path / "out" / f"fig1_bias_{model}.pdf").is_file(), model


def test_an_unchanged_figure_is_written_byte_for_byte_again(tmp_path, monkeypatch):
    """Rendered at two different times (matplotlib dates PDFs by SOURCE_DATE_EPOCH, else the clock): same bytes."""
    root = _results(tmp_path)
    for run, epoch in (("first", "0"), ("second", "1700000000")):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        figures_main(["--results-dir", str(root), "--out", str(tmp_path / run)])
    first = sorted(p.name for p in (tmp_path / "first").iterdir())
    assert {Path(n).suffix for n in first} == {".png", ".pdf"} and len(first) >= 6
    for name in first:
        assert (tmp_path / "first" / name).read_bytes() == (tmp_path / "second" / name).read_bytes(), name


def _row(method: str, setting: str, metric: str, value: float, l_ex: float, stamp: str = "2026-01-01T00:00:00") -> dict:
    return {"model": "m", "method": method, "task": "lm", "setting": setting, "metric": metric, "value": value,
            "L_ex": l_ex, "L_tr": 128, "status": "ok", "timestamp": stamp}


def test_a_temperature_figure_draws_its_tables_cells():
    """Figure 3's Prop. 2 and Algorithm 1 points are Table 8's cells (the newest ok row of each), not τ recomputed
    from the separate τ = 1 statistics, which a few other examples give other values."""
    import pandas as pd

    from lengthx.report.figures.paper_a import temperature_series

    rows = [_row("stats", "L_tr", "l0_sigma", 1.7, 128), _row("stats", "L_tr", "l0_pmax", 0.38, 128),
            _row("stats", "1024", "l0_sigma", 2.08, 256), _row("stats", "1024", "l0_pmax", 0.19, 256),
            _row("prop2", "1024", "tau", 0.8974, 255.8), _row("pmax", "1024", "tau", 0.9, 255.8),
            _row("pmax", "1024", "tau", 0.85, 255.8, "2026-02-01T00:00:00")]  # a newer cell replaces the older
    series = temperature_series(pd.DataFrame(rows), "m", "lm")
    assert set(series) == {"prop2", "pmax"}
    assert series["prop2"]["value"].tolist() == [0.8974] and series["pmax"]["value"].tolist() == [0.85]


def test_the_consistency_check_names_a_cell_that_disagrees(tmp_path):
    from lengthx.core.store import ResultsStore
    from lengthx.report.figures.consistency import disagreements

    (tmp_path / "tables").mkdir()
    for name in ("aa_table8.md", "aa_table9.md", "aa_table10.md", "aa_table11.md", "ext_tau_vs_segmented.md"):
        text = (RESULTS / "tables" / name).read_text()
        if name == "aa_table8.md":
            text = text.replace("| w/ Prop. 2 | 0.90 |", "| w/ Prop. 2 | 0.91 |")
        (tmp_path / "tables" / name).write_text(text)
    found = disagreements(tmp_path, ResultsStore(RESULTS).read())
    assert found == ["aa_table8 / mini-T5-LM / w/ Prop. 2 at 1024: the figure draws 0.90, the table prints 0.91"]
