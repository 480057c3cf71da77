"""Tables made of the model configs (paper A Table 2, paper B Table 1) and τ per calibrated column (Table 10)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from omegaconf import open_dict

from lengthx.cli.tables import tables_main
from lengthx.core.cells import config_hash
from lengthx.models.minis import compose_run
from lengthx.tasks import resolve_settings

ROOT = Path(__file__).resolve().parents[1]


def _table(md: str) -> dict[str, list[str]]:
    """Markdown table rows by their first cell."""
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in md.splitlines() if line.startswith("| ")]
    return {r[0]: r[1:] for r in rows}


def test_model_tables_are_rendered_from_the_configs(tmp_path):
    (tmp_path / "none").mkdir()  # a results directory with no results yet (one that does not exist is an error)
    tables_main(["--results-dir", str(tmp_path / "none"), "--out", str(tmp_path / "t"), "--compare-paper"])
    t2 = _table((tmp_path / "t" / "aa_table2_vs_paper.md").read_text())
    header = t2["Models"]
    pe = dict(zip(header, t2["PE."], strict=True))
    configs = dict(zip(header, t2["configs"], strict=True))
    assert pe["T5"] == "learned relative buckets (Learned Relative)" and "flan-t5-xl" in configs["T5"]
    assert pe["BLOOM"] == "ALiBi (ALiBi Relative)" and pe["LLaMA"].endswith("(Rotary Relative)")
    assert pe["Pythia (GPT-NeoX)"] == "RoPE (Rotary Relative)" and pe["GPT-2"] == "APE"
    b1 = _table((tmp_path / "t" / "sb_table1_vs_paper.md").read_text())
    assert b1["Models"] == ["# of params", "PE", "L_t"]
    assert b1["GPT-2 (gpt2)"] == ["124M (170M)", "APE (APE)", "1024 (1024)"]
    assert b1["BLOOM-1b1 (bigscience/bloom-1b1)"][1:] == ["ALiBi (ALiBi)", "2048 (2048)"]
    assert b1["mini-pythia (profile=mini, for Pythia-160m, Pythia-1.4B)"] == ["1.84M", "RoPE", "128"]
    tables_main(["--results-dir", str(tmp_path / "none"), "--out", str(tmp_path / "t")])  # ours alone
    assert "(" not in _table((tmp_path / "t" / "sb_table1.md").read_text())["GPT-2 (gpt2)"][0]
    assert r"\toprule" in (tmp_path / "t" / "aa_table2.tex").read_text()


def test_descriptive_model_keys_do_not_change_a_cells_hash(tmp_path):
    """``model.params`` only describes a model: committed cells keep their hash."""
    cfg = compose_run(["model=mini-t5", f"results_dir={tmp_path}"])
    setting = resolve_settings(cfg.task, "mini", 256)[0]
    with_params = config_hash(cfg, setting)
    with open_dict(cfg.model):
        cfg.model.pop("params")
    assert "params" not in cfg.model and config_hash(cfg, setting) == with_params
    with open_dict(cfg.model):
        cfg.model.params = "12M"
    assert config_hash(cfg, setting) == with_params


# ---- Table 10: τ of every calibrated gold position ------------------------------------------------------------


def test_table10_shows_tau_of_every_calibrated_gold_position():
    from lengthx.report.tables.paper_a import TABLE10
    from lengthx.report.tables.render import render

    taus = {"10docs@0": 0.80, "10docs@4": 0.85, "10docs@9": 0.75, "30docs@29": 0.55}
    df = pd.DataFrame([{"model": "mini-t5", "method": "pmax", "task": "mdqa", "setting": s, "metric": "tau",
                        "value": v, "status": "ok", "timestamp": "t", "data": "generated"} for s, v in taus.items()])
    out = render(TABLE10, df, compare_paper=True)
    row = _table(out.markdown)["w/ P_{max}"]
    assert len(row) == 15  # 3 + 5 + 7 gold positions, each calibrated separately
    assert row[:3] == ["0.80 (0.85)", "0.85 (0.85)", "0.75 (0.85)"]  # the paper's one 10-docs τ beside each
    assert row[-1] == "0.55 (0.75)" and row[3] == "– (0.75)"
    header = next(line for line in out.markdown.splitlines() if line.startswith("| Models"))
    assert "10 Docs 4" in header and "30 Docs 29" in header


def test_the_grid_end_note_goes_only_under_a_table_with_a_cell_at_the_grids_end():
    """The note on τ at Algorithm 1's grid end follows the cells it marks: results/mini holds such τ for topics and
    passkey (Tables 9, 10), never for Table 3's perplexity, whose bold best values (``**…**``) once passed for the
    mark and drew the note."""
    from lengthx.core.store import ResultsStore
    from lengthx.report.tables import TABLES
    from lengthx.report.tables.render import UNALIGNED_NOTE, render

    store = ResultsStore(ROOT / "results" / "mini")
    df = store.read()
    md = {name: render(TABLES[name], df, store=store).markdown for name in ("aa_table3", "aa_table9")}
    assert "**" in md["aa_table3"] and UNALIGNED_NOTE not in md["aa_table3"]
    assert UNALIGNED_NOTE in md["aa_table9"]
