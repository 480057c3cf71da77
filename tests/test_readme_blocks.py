"""README and docs result blocks are regenerated from files, never typed (lengthx.report.tables.readme)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lengthx.report.tables.readme import update_blocks

ROOT = Path(__file__).resolve().parents[1]
# the Markdown files whose prose numbers must each be printed by a file of their section: the README and the docs
# that hold its reference and results; any other doc that names sources (`<!-- lengthx:sources … -->`) joins them
CHECKED = ["README.md", "docs/usage.md", "docs/protocol.md", "docs/results-paper-a.md", "docs/results-paper-b.md",
           "docs/cluster.md", "docs/architecture.md"]


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def checked() -> list[str]:
    with_sources = [str(p.relative_to(ROOT)) for p in markdown_files() if "<!-- lengthx:sources" in p.read_text()]
    return sorted(set(CHECKED) | set(with_sources))


def test_blocks_take_their_files_content_and_the_rest_is_kept(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.md").write_text("| x |\n|---|\n| 1.5 |\n")
    md = tmp_path / "README.md"
    md.write_text("intro\n<!-- lengthx:include t/a.md -->\nstale 9.9\n<!-- /lengthx:include -->\noutro\n")
    assert update_blocks(md) == ["t/a.md"]
    assert md.read_text() == "intro\n<!-- lengthx:include t/a.md -->\n| x |\n|---|\n| 1.5 |\n<!-- /lengthx:include -->\noutro\n"
    (tmp_path / "t" / "a.md").write_text("| x |\n|---|\n| 2.5 |\n")
    update_blocks(md)  # idempotent markers, new content
    assert "2.5" in md.read_text() and "1.5" not in md.read_text() and md.read_text().endswith("outro\n")


def test_missing_file_is_named(tmp_path):
    md = tmp_path / "README.md"
    md.write_text("<!-- lengthx:include nope.md -->\n<!-- /lengthx:include -->\n")
    with pytest.raises(FileNotFoundError, match="nope.md"):
        update_blocks(md)


def test_a_prose_number_no_source_prints_is_named(tmp_path):
    from lengthx.report.tables.readme import unbacked_numbers

    (tmp_path / "t.md").write_text("| a | 0.383 | −1.250 |\n")
    md = tmp_path / "README.md"
    md.write_text("## One\n<!-- lengthx:sources t.md -->\nP_max falls from 0.383 (−1.250 in all, +1.250 up).\n"
                  "## Two\nIt was 0.383 at `0.999`, Pythia-1.4B, 3 runs, §5.4, and 0.28 by hand.\n")
    # +1.250 is not −1.250; section Two names no file; code spans, names, counts and § marks are not quantities
    assert unbacked_numbers(md) == [f"{md}:3: 1.250", f"{md}:5: 0.383", f"{md}:5: 0.28"]
