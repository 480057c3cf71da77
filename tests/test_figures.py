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
