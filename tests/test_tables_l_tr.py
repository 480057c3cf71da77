"""Every paper A table on the mini profile shows the stand-in at its own training length, and says so where the
stand-in does not do a task there (lengthx.report.tables.marks; docs/results.md, "Reading a mini table")."""

from __future__ import annotations

import pandas as pd

from lengthx.report.tables.paper_a import TABLE4, TABLE9
from lengthx.report.tables.render import render


def _row(method: str, task: str, setting: str, value: float, metric: str = "accuracy", n: int = 10) -> dict:
    return {"paper": "A", "table": "4", "model": "mini-t5", "method": method, "task": task, "setting": setting,
            "metric": metric, "value": value, "n": n, "tau": 1.0, "L_tr": 256, "status": "ok", "message": "",
            "cell": f"mini-t5|{method}|{task}|{setting}", "config_hash": f"h-{method}-{task}-{setting}",
            "timestamp": "2026-11-27T00:00:00", "data": "synthetic"}


def _frame(with_l_tr: bool) -> pd.DataFrame:
    rows = [_row(m, "passkey", s, 100.0) for m in ("none", "pmax") for s in ("20k", "30k", "40k", "50k", "55k")]
    rows += [_row(m, "lines", s, 0.0) for m in ("none", "pmax") for s in ("200", "680")]
    rows += [_row("pmax", "passkey", "20k", 0.7, metric="tau")]
    if with_l_tr:
        rows += [_row("none", "passkey", "256tokens", 100.0), _row("none", "lines", "256tokens", 0.0)]
    return pd.DataFrame(rows)


def _header(markdown: str) -> list[str]:
    return [c.strip() for c in markdown.splitlines()[2].split("|")[1:-1]]


def test_an_l_tr_column_per_task_and_a_caption_below_the_bar():
    md = render(TABLE4, _frame(with_l_tr=True)).markdown
    head = _header(md)
    assert head[:3] == ["Models", "Topic L_tr", "Topic 5"] and "Line L_tr" in head and "Passkey L_tr" in head
    assert head.index("Line L_tr") == head.index("Line 200") - 1
    model_row = next(line for line in md.splitlines() if line.startswith("| **mini-T5**"))
    cells = [c.strip() for c in model_row.split("|")[1:-1]]
    assert cells[head.index("Passkey L_tr")].startswith("100") and cells[head.index("Line L_tr")].startswith("0")
    # the caption says lines carries no signal, and nothing of passkey (at its bar); topics was never run at L_tr
    assert "does not do lines at L_tr (0%, n = 10 at 256 tokens; bar 50%)" in md
    assert "does not do passkey" not in md
    assert "score on topics at its training length is not measured" in md


def test_the_l_tr_column_stays_out_of_the_average_and_the_published_comparison():
    df = _frame(with_l_tr=True)
    full = [_row("none", "topics", s, 50.0) for s in ("5", "10", "15", "20", "25")]
    full += [_row("none", "lines", s, 0.0) for s in ("300", "400", "500", "600")]
    full += [_row("none", "topics", "256tokens", 100.0)]
    md = render(TABLE4, pd.concat([df, pd.DataFrame(full)], ignore_index=True), compare_paper=True).markdown
    head = _header(md)
    model_row = next(line for line in md.splitlines() if line.startswith("| **mini-T5**"))
    cells = [c.strip() for c in model_row.split("|")[1:-1]]
    # 16 columns at the table's lengths: 5 × 50, 6 × 0, 5 × 100 → 46.875; the L_tr columns (100, 0, 100) not in it
    assert cells[head.index("Avg.")].startswith("47 (")
    assert cells[head.index("Topic L_tr")] == "100"  # no published value beside it
    assert cells[head.index("Topic 5")].startswith("50 (")  # the paper's Topic 5 stays beside our Topic 5


def test_no_l_tr_column_without_l_tr_cells_and_a_caption_on_temperature_tables():
    assert "L_tr" not in _header(render(TABLE4, _frame(with_l_tr=False)).markdown)
    md = render(TABLE9, _frame(with_l_tr=True)).markdown
    assert "L_tr" not in _header(md)
    assert "does not do lines at L_tr" in md and "mini-T5 at L_tr on passkey: 100%" in md


def test_the_usual_count_is_of_the_cells_the_table_shows():
    """A store holding other cells of the same task (the demo's K = 5 records, n = 60) does not make a table whose
    filled cells are all n = 4 say "n = 60"."""
    rows = [_row(m, "passkey", "20k", 100.0, n=4) for m in ("none", "pmax")]
    rows += [_row(m, "passkey", "2560tokens-5topics", 50.0, n=60) for m in ("none", "pmax", "entropy")]
    md = render(TABLE4, pd.DataFrame(rows)).markdown
    assert "Examples per cell: n = 4." in md and "(n=4)" not in md


def test_the_caption_names_the_stand_in_a_task_is_handed_to(tmp_path, monkeypatch):
    """A mini that hands lines to another stand-in (``task_minis``, lengthx.models.minis): Table 4's caption names
    the one that computed the lines cells, and says nothing of it where the table holds no lines rows or the mini
    hands nothing on."""
    import re

    from lengthx.models import minis

    own = re.sub(r"(?ms)^task_minis:.*?(?=^\S|\Z)", "", (minis.CONF_MODEL_DIR / "mini-t5.yaml").read_text())
    (tmp_path / "mini-t5-lookup.yaml").write_text("name: mini-t5-lookup\ndisplay: mini-T5-lookup\npath: /x\nfamily: t5\n"
                                                  "l_tr: 256\ndescription: finds lines\n")
    monkeypatch.setattr(minis, "CONF_MODEL_DIR", tmp_path)
    df = _frame(with_l_tr=True)
    (tmp_path / "mini-t5.yaml").write_text(own)
    assert "computed by" not in render(TABLE4, df).markdown
    (tmp_path / "mini-t5.yaml").write_text(own + "task_minis:\n  lines: mini-t5-lookup\n")
    md = render(TABLE4, df).markdown
    assert "mini-T5's lines cells are computed by the stand-in that does lines at L_tr, mini-T5-lookup " \
           "(conf/model/mini-t5-lookup.yaml): finds lines." in md
    assert "computed by" not in render(TABLE4, df[df.task != "lines"]).markdown
