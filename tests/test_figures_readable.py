"""Figures a reader can match to their tables (docs/design.md §7): a temperature figure labels its x-axis in its
table's units too, its legend sits beside the data, and paper B's Figure 3 names a mini as the mini it is."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parents[1] / "results" / "mini"


def _row(method: str, setting: str, value: float, l_ex: float) -> dict:
    return {"model": "m", "method": method, "task": "lm", "setting": setting, "metric": "tau", "value": value,
            "L_ex": l_ex, "L_tr": 128, "status": "ok", "timestamp": "2026-01-01T00:00:00"}


def _drawn(monkeypatch, draw) -> list:
    """The matplotlib figures ``draw(save)`` hands to its save function (instead of writing them)."""
    from lengthx.report.figures import paper_a

    figs: list = []
    monkeypatch.setattr(paper_a, "_save", lambda fig, out, name: figs.append(fig) or [Path(name)])
    draw(lambda fig, out, name: figs.append(fig) or [Path(name)])
    return figs


def test_a_temperature_figure_labels_its_columns_as_its_table_does(monkeypatch, tmp_path):
    """A mini reads Table 8's 15000-token column at L_ex ≈ 3750: the figure shows both, the table's label above
    the cell's L_ex, and its legend outside the axes."""
    from lengthx.report.figures.paper_a import temperature_figure

    df = pd.DataFrame([_row("prop2", "1024", 0.9, 255.8), _row("prop2", "15000", 0.64, 3749.8),
                       _row("pmax", "1024", 0.85, 255.8), _row("pmax", "15000", 0.5, 3749.8)])
    (fig,) = _drawn(monkeypatch, lambda save: temperature_figure(df, "m", "lm", tmp_path))
    ax = fig.axes[0]
    (top,) = ax.child_axes  # the secondary x-axis
    assert [t.get_text() for t in top.get_xticklabels()] == ["1024", "15000"]
    assert list(top.get_xticks()) == [255.8, 3749.8] and "Table 8" in top.get_xlabel()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1


def test_settings_read_at_one_length_share_one_tick_label():
    """MDQA's gold positions of 30 documents are one length: one label, not three drawn over each other."""
    from lengthx.report.figures.paper_a import _joined

    assert _joined(["30docs@0", "30docs@14", "30docs@29"]) == "30docs@0,14,29"
    assert _joined(["1024"]) == "1024" and _joined(["5", "a@1"]) == "5, a@1"


def test_figure_3_names_the_minis_for_the_paper_models(monkeypatch, tmp_path):
    """results/mini's attention side files were written by mini-gpt2 at L_t = 128 under gpt2-xl's name."""
    from lengthx.report.figures.paper_b import figure3_medians, run_name

    assert run_name("gpt2-xl", 128) == "mini-gpt2 (for GPT-2-XL)"
    assert run_name("gpt2-xl", 1024) == "gpt2-xl" and run_name("mini-gpt2", 128) == "mini-gpt2"
    (fig,) = _drawn(monkeypatch, lambda save: figure3_medians(RESULTS / "attention", tmp_path, save))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["mini-bloom (for BLOOM-1b1) at 4L_t", "mini-gpt2 (for GPT-2-XL) at 4L_t",
                      "mini-pythia (for Pythia-1.4B) at 4L_t"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:  # each legend below its panel, none over a histogram
        assert ax.get_legend().get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y0
