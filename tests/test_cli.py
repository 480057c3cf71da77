"""What ``lengthx`` prints about itself: ``lengthx ls`` (docs/design.md §11)."""

from __future__ import annotations

from lengthx.cli import main
from lengthx.config import CONF_DIR


def test_ls_prints_each_description_whole(capsys):
    """An experiment's description is its config's leading comment paragraph, in full, without the usage
    examples under it."""
    main(["ls"])
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    experiments = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
    assert experiments
    for name in experiments:
        assert lines[name].rstrip().endswith("."), lines[name]  # the paragraph's last sentence, not its first line
        assert "-m experiment=" not in lines[name], lines[name]
    assert "LongChat-13B-16K baseline row (its chat template, method none): 192 + 16 = 208 cells." in lines["aa_table4"]
    assert lines["mini"].rstrip().endswith("L_tr(model) / L_tr(paper).")
