"""Regenerate the result blocks of a Markdown file (the README) from rendered tables, so no number is typed.

A block is a pair of markers around generated text::

    <!-- lengthx:include results/mini/tables/sb_table3_vs_paper.md -->
    …replaced by that file's content…
    <!-- /lengthx:include -->

``python -m lengthx.report.tables.readme README.md`` rewrites every block from its file (paths relative to the
Markdown file's directory) and fails, naming the file, when one is missing. ``make reproduce-mini`` runs it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

BLOCK = re.compile(r"(<!-- lengthx:include (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- /lengthx:include -->)", re.S)


def update_blocks(markdown: Path) -> list[str]:
    """Rewrite ``markdown``'s include blocks in place; returns the included paths."""
    text = markdown.read_text()
    included: list[str] = []

    def fill(m: re.Match) -> str:
        src = markdown.parent / m.group("path")
        if not src.is_file():
            raise FileNotFoundError(f"{markdown}: block includes {src}, which does not exist; "
                                    "run `make reproduce-mini` (or `lengthx tables --compare-paper`) first")
        included.append(m.group("path"))
        return m.group(1) + src.read_text().rstrip("\n") + "\n" + m.group(4)

    new = BLOCK.sub(fill, text)
    if new != text:
        tmp = markdown.with_suffix(".tmp")
        tmp.write_text(new)
        tmp.replace(markdown)
    return included


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    for name in args or ["README.md"]:
        try:
            for path in update_blocks(Path(name)):
                print(f"{name}: refreshed the block of {path}")
        except FileNotFoundError as err:
            sys.exit(f"lengthx.report.tables.readme: {err}")


if __name__ == "__main__":
    main()
