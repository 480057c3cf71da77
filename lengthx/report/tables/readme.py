"""Regenerate the result blocks of a Markdown file (the README, docs/) from rendered tables, so no number is typed.

A block is a pair of markers around generated text::

    <!-- lengthx:include results/mini/tables/sb_table3_vs_paper.md -->
    …replaced by that file's content…
    <!-- /lengthx:include -->

``python -m lengthx.report.tables.readme FILE …`` rewrites every block from its file and fails, naming the file,
when one is missing. Paths (here and in ``lengthx:sources`` comments) are relative to the Markdown file's directory,
as a Markdown link's are: the README names ``results/mini/tables/aa_table3.md``, a file in ``docs/`` names
``../results/mini/tables/aa_table3.md``.
``make reproduce-mini`` runs it on every Markdown file with a block (the Makefile's ``MARKDOWN_BLOCKS``).

Numbers in the prose around the blocks come from files too: every quantity the prose states (a number with a
decimal point, a sign, a per cent sign or a thousands separator) must appear, as printed, in a file the section
names: the files its blocks include, and those of a ``<!-- lengthx:sources path … -->`` comment in the section (a
section runs from one ``##`` heading to the next). :func:`unbacked_numbers` lists those that appear in none;
``--check`` prints them and fails; ``tests/test_readme_blocks.py`` runs it on the README and on the docs that hold
results (those of ``tests/test_readme_blocks.py``'s ``CHECKED``). Code, tables, headings, link targets and section
marks (§5.4) are not prose.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

BLOCK = re.compile(r"(<!-- lengthx:include (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- /lengthx:include -->)", re.S)
SOURCES = re.compile(r"<!-- lengthx:sources (?P<paths>[^>]*?) -->")
# a stated quantity: signed, decimal, per cent or with thousands separators (plain integers count things), alone
# or in millions ("1.40M"); not part of a name ("Pythia-1.4B")
QUANTITY = re.compile(r"(?<![\w.§/-])([+−-]?)(\d{1,3}(?:,\d{3})+|\d+\.\d+|\d+%|(?<=[+−-])\d+)(?!\.\d)(?=M\b|\W|$)")
_NOT_PROSE = (re.compile(r"```.*?```", re.S), re.compile(r"<!--.*?-->", re.S), re.compile(r"`[^`\n]*`"),
              re.compile(r"\]\([^)]*\)"))


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


def _quantities(text: str) -> list[str]:
    """The quantities of ``text``, normalised: no ``+``, a hyphen for a minus sign, no thousands separators."""
    return [(sign.replace("−", "-").replace("+", "") + num).replace(",", "") for sign, num in QUANTITY.findall(text)]


def unbacked_numbers(markdown: Path) -> list[str]:
    """``"<file>:<line>: <number>"`` for every quantity in ``markdown``'s prose that no source of its section
    prints (module doc); paths are relative to the Markdown file's directory."""
    text = markdown.read_text(encoding="utf-8")
    out: list[str] = []
    sections = re.split(r"(?m)^(?=## )", text)
    first_line = 1
    for section in sections:
        paths = [m.group("path") for m in BLOCK.finditer(section)]
        paths += [p for m in SOURCES.finditer(section) for p in m.group("paths").split()]
        backed: set[str] = set()
        for path in paths:
            src = markdown.parent / path
            if not src.is_file():
                out.append(f"{markdown}:{first_line}: the section names {path}, which does not exist")
                continue
            backed.update(_quantities(src.read_text(encoding="utf-8")))
        prose = BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), section)
        for pattern in _NOT_PROSE:
            prose = pattern.sub(lambda m: "\n" * m.group(0).count("\n"), prose)
        for k, line in enumerate(prose.split("\n")):
            if line.startswith(("|", "#")):
                continue
            out += [f"{markdown}:{first_line + k}: {q}" for q in _quantities(line) if q not in backed]
        first_line += section.count("\n")
    return out


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--check"]:
        found = [line for name in args[1:] or ["README.md"] for line in unbacked_numbers(Path(name))]
        for line in found:
            print(f"{line}: a number no file of its section prints")
        sys.exit(1 if found else 0)
    for name in args or ["README.md"]:
        try:
            for path in update_blocks(Path(name)):
                print(f"{name}: refreshed the block of {path}")
        except FileNotFoundError as err:
            sys.exit(f"lengthx.report.tables.readme: {err}")


if __name__ == "__main__":
    main()
