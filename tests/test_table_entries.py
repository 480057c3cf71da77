"""A table cell built as a structured entry and written by each emitter (lengthx.report.tables.entries): the
Markdown keeps the tables' text, the LaTeX escapes what LaTeX needs, and neither reads the other's text back."""

from __future__ import annotations

from lengthx.report.tables.entries import STALE_MARK, Entry


def test_every_annotation_in_order_in_both_formats():
    e = Entry("41.7", grid_end=True, stale=True, interval=("30", "55"), count=12, bold=True)
    assert e.markdown() == f"**41.7*{STALE_MARK} [30, 55] (n=12)**"
    assert e.latex() == r"\textbf{41.7*\ddag{} [30, 55] (n=12)}"


def test_overflow_and_a_published_value_beside_a_missing_one():
    assert Entry(">1k").latex() == "$>$1k" and Entry(">1e+04").latex() == "$>$1e+04"  # any overflow label
    assert Entry("", published="72.0").markdown() == "– (72.0)"
    assert Entry("12.5", published=">1k").latex() == "12.5 ($>$1k)"
    assert Entry("").markdown() == "" and Entry("", stale=True).latex() == ""  # nothing to mark


def test_a_stale_cell_of_a_rendered_table_is_latex_in_the_tex_and_markdown_in_the_md(tmp_path):
    from lengthx.core.store import ResultsStore
    from lengthx.report.tables.paper_a import TABLE3
    from lengthx.report.tables.render import render

    store = ResultsStore(tmp_path)
    for method, value in (("none", 30.0), ("pmax", 20.0)):
        key = f"mini-t5-lm|{method}|lm|1024"
        store.append_rows([{"paper": "A", "table": "3", "model": "mini-t5-lm", "method": method, "task": "lm",
                            "setting": "1024", "metric": "perplexity", "value": value, "n": 4, "status": "ok",
                            "cell": key, "config_hash": f"h-{method}"}], key, f"h-{method}")
    r = render(TABLE3, store.read(), stale={"mini-t5-lm|pmax|lm|1024"})
    assert f"| 20.0{STALE_MARK} |" in r.markdown
    assert r"20.0\ddag{}" in r.latex and STALE_MARK not in r.latex


def test_a_caption_escapes_what_would_break_latex():
    from lengthx.report.tables.entries import latex_text

    assert latex_text("retrieval accuracy (%) & more ‡") == r"retrieval accuracy (\%) \& more \ddag{}"
    assert latex_text("w/ $P_{\\max}$") == "w/ $P_{\\max}$"  # math kept
