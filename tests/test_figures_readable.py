"""Figures a reader can match to their tables (docs/design.md §7): a temperature figure labels its x-axis in its
table's units too, its legend sits beside the data, and paper B's Figure 3 names a mini as the mini it is."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

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


def _ppl_cell(store, model: str, method: str, setting: str, values: list[float]) -> None:
    key = f"{model}|{method}|segmented_ppl|{setting}"
    for i, v in enumerate(values):
        store.append_record(key, {"id": f"doc#{i}", "config_hash": f"{method}-{setting}", "scores": {"ppl": v}})
    store.append_rows([{"paper": "B", "table": "ext", "model": model, "method": method, "task": "segmented_ppl",
                        "setting": setting, "metric": "ppl", "value": sum(values) / len(values), "n": len(values),
                        "L_tr": 128, "status": "ok", "cell": key, "config_hash": f"{method}-{setting}",
                        "timestamp": "2026-01-01T00:00:00"}], key, f"{method}-{setting}")


def test_tau_vs_segmented_draws_the_tables_paired_intervals_and_a_legend_that_reads(tmp_path):
    """Each line carries the band of its paired 95% interval to OOTB (the table's), the legend below the panels in
    the axes' type size, and a paper model run by its mini is named as the mini."""
    from matplotlib.collections import PolyCollection

    from lengthx.core.store import ResultsStore
    from lengthx.report.figures.tau_vs_segmented import tau_vs_segmented_figure
    from lengthx.report.tables.intervals import paired_difference_ci
    from lengthx.report.tables.tau_vs_segmented import SETTINGS

    store = ResultsStore(tmp_path / "results")
    ootb = [30.0, 42.0, 35.0, 50.0, 44.0]
    log = [28.0, 41.0, 31.0, 47.0, 45.0]
    for i, setting in enumerate(SETTINGS):
        _ppl_cell(store, "gpt2", "ootb", setting, [v + i for v in ootb])
        _ppl_cell(store, "gpt2", "ootb+log", setting, [v + 2 * i for v in log])
    figs: list = []
    tau_vs_segmented_figure(store.read(), tmp_path, lambda fig, out, name: figs.append(fig) or [], store)
    (fig,) = figs
    ax = fig.axes[0]
    assert ax.get_title().startswith("mini-gpt2 (for GPT-2), APE")
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    lows = []
    for i, _ in enumerate(SETTINGS):
        _, lo, hi = paired_difference_ci([v + 2 * i for v in log], [v + i for v in ootb])
        lows.append(lo)
        assert band.get_paths()[0].vertices[:, 1].min() <= lo and hi <= band.get_paths()[0].vertices[:, 1].max()
    assert round(band.get_paths()[0].vertices[:, 1].min(), 9) == round(min(lows), 9)
    legend = fig.legends[0]
    assert min(t.get_fontsize() for t in legend.get_texts()) >= ax.xaxis.label.get_fontsize()
    assert any("95% interval" in t.get_text() for t in legend.get_texts())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert legend.get_window_extent(renderer).y1 <= min(a.get_tightbbox(renderer).y0 for a in fig.axes)


def _accuracy_cell(store, method: str, setting: str, l_ex: float, right: list[int], value: float | None = None) -> None:
    key = f"gpt2-xl|{method}|passkey|{setting}"
    for i, r in enumerate(right):
        store.append_record(key, {"id": f"0-{i}", "config_hash": key, "scores": {"accuracy": 100.0 * r}})
    mean = 100.0 * sum(right) / len(right)
    store.append_rows([{"paper": "A", "table": "4", "model": "gpt2-xl", "method": method, "task": "passkey",
                        "setting": setting, "metric": "accuracy", "value": mean if value is None else value,
                        "n": len(right), "L_tr": 128, "L_ex": l_ex, "status": "ok", "cell": key, "config_hash": key,
                        "timestamp": "2026-01-01T00:00:00"}], key, key)


def test_lengthx_figures_draws_whatever_ran_with_intervals(tmp_path):
    """The Quickstart's cells (one task, a few methods and settings, no statistics) get a figure: accuracy against
    length per method, each cell's Wilson interval from its records as the tables print it, both units on the
    x-axis, the legend beside the data and the mini named; a value that is not its records' mean gets no bar."""
    from matplotlib.collections import LineCollection

    from lengthx.cli.figures import figures_main
    from lengthx.core.store import ResultsStore
    from lengthx.report.figures.ran import ran_figures
    from lengthx.report.tables.intervals import wilson_ci

    root = tmp_path / "results"
    store = ResultsStore(root)
    _accuracy_cell(store, "none", "20k", 2702.0, [1, 1, 0, 1])
    _accuracy_cell(store, "none", "30k", 4054.0, [1, 0, 0], value=33.3333)  # the mean, rounded as results.csv has it
    _accuracy_cell(store, "log", "20k", 2702.0, [1, 1, 1, 1])
    _accuracy_cell(store, "pmax", "30k", 4054.0, [1, 1, 1, 0], value=60.0)  # not the mean of its records
    figures_main(["--results-dir", str(root), "--runs-dir", str(tmp_path / "runs")])
    assert sorted(p.name for p in (root / "figures").iterdir()) == ["ran_gpt2-xl_passkey.pdf", "ran_gpt2-xl_passkey.png"]
    figs: list = []
    ran_figures(store.read(), store, tmp_path, lambda fig, out, name: figs.append(fig) or [])
    (fig,) = figs
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["20k\n2,702 tok", "30k\n4,054 tok"]
    assert ax.get_ylabel() == "accuracy (%)"
    assert fig.texts[0].get_text().startswith("mini-gpt2 (for GPT-2-XL), passkey")
    bars = {}
    for container in ax.containers:
        (segments,) = [c for c in container.lines[2] if isinstance(c, LineCollection)]
        bars[container.get_label()] = [tuple(float(v) for v in seg[:, 1]) for seg in segments.get_segments()]
    lo, hi = wilson_ci(3, 4)
    assert bars["τ = 1"][0] == pytest.approx((100 * lo, 100 * hi))
    lo, hi = wilson_ci(1, 3)
    assert bars["τ = 1"][1] == pytest.approx((100 * lo, 100 * hi))
    assert bars["w/ $P_{\\max}$"] == [(60.0, 60.0)]  # no interval that is not the value's
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert fig.legends[0].get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1


def test_paper_b_figure_2_names_the_minis_in_a_legend_off_the_curves(tmp_path):
    """results/mini's OOTB curves: gpt2 and gpt2-xl ran as one mini-gpt2, labelled as that mini for both, the legend
    below the axes and the x-axis in the tables' column labels (L_t, 2L_t, …)."""
    from lengthx.api.data import read_results
    from lengthx.report.figures.paper_b import figure2_ootb

    figs: list = []
    figure2_ootb(read_results(RESULTS), tmp_path, lambda fig, out, name: figs.append(fig) or [])
    (fig,) = figs
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "mini-gpt2 (for GPT-2 = GPT-2-XL)" in labels and not any(label.startswith("gpt2") for label in labels)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["$L_t$", "$2L_t$", "$3L_t$", "$4L_t$", "$5L_t$"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).y1 <= ax.get_window_extent(renderer).y0


def test_a_crowded_whatever_ran_figure_is_drawn_in_groups_that_each_read():
    """Paper B's segmented_ppl of one mini holds 28 methods: each checkpoint with its τ rules, then the checkpoints
    by training length with the untrained references in each; no group past ten, every method drawn."""
    from lengthx.report.figures.ran import MOST_METHODS, method_groups

    rules = ("entropy", "log", "logn", "longrope", "pmax", "ssmax", "yarn")
    trained = [f"{r}@{at}" for r in ("chunk-0.125", "chunk-0.25", "chunk-0.5", "full", "prefix-0.25", "prefix-0.5")
               for at in ("2L_t", "4L_t")]
    methods = sorted(["pretrained", "ootb", *trained, *(f"{b}+{r}" for b in ("ootb", "chunk-0.25@4L_t") for r in rules)])
    groups = dict(method_groups(methods))
    assert sorted(groups) == ["at-2L_t", "at-4L_t", "chunk-0.25@4L_t+rules", "ootb+rules"]
    assert all(len(m) <= MOST_METHODS for m in groups.values())
    assert set().union(*groups.values()) == set(methods)
    assert groups["ootb+rules"] == ["ootb", *(f"ootb+{r}" for r in rules)]
    assert {"ootb", "pretrained"} <= set(groups["at-2L_t"]) and "full@4L_t" not in groups["at-2L_t"]
    assert method_groups(["none", "log", "pmax"]) == [("", ["none", "log", "pmax"])]  # few: one figure as before
