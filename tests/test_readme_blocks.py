"""README result blocks are regenerated from files, never typed (lengthx.report.tables.readme)."""

from __future__ import annotations

import pytest

from lengthx.report.tables.readme import update_blocks


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
