"""Checks of committed artifacts and docs (tests/artifacts/README.md): they fail when the committed results,
checkpoints or docs are out of step with the code, not when the code breaks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_readme_blocks import checked, markdown_files  # the code tests' list of checked docs

ROOT = Path(__file__).resolve().parents[2]

# the Markdown files whose prose numbers must each be printed by a file of their section: the README and the docs
# that hold its reference and results; any other doc that names sources (`<!-- lengthx:sources … -->`) joins them


@pytest.mark.parametrize("name", checked())
def test_every_number_of_the_readme_prose_is_printed_by_a_file_of_its_section(name):
    """A quantity stated in the prose of the README or of a doc holding its reference (outside their generated
    blocks) appears, as printed, in a committed file its section includes or names (``<!-- lengthx:sources … -->``,
    paths relative to the Markdown file)."""
    from lengthx.report.tables.readme import unbacked_numbers

    assert (ROOT / name).is_file(), name
    assert unbacked_numbers(ROOT / name) == []


def test_make_reproduce_mini_refreshes_every_markdown_file_with_a_block():
    """Every Markdown file holding a ``<!-- lengthx:include … -->`` block is in the Makefile's MARKDOWN_BLOCKS,
    which ``make reproduce-mini`` refreshes, and each of its blocks names a file that exists."""
    listed = re.search(r"^MARKDOWN_BLOCKS := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    with_blocks = [p for p in markdown_files() if "<!-- lengthx:include " in p.read_text()]
    assert {"docs/results-paper-a.md", "docs/results-paper-b.md", "docs/protocol.md"} <= {
        str(p.relative_to(ROOT)) for p in with_blocks}
    assert {str(p.relative_to(ROOT)) for p in with_blocks} <= set(listed), listed
    for name in listed:
        md = ROOT / name
        for path in re.findall(r"<!-- lengthx:include (\S+) -->", md.read_text()):
            assert (md.parent / path).is_file(), (name, path)
