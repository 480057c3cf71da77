"""The README's and docs' pointers lead somewhere: a Markdown link or image resolves from its file's folder (as
GitHub resolves it), and a repository path named in the text (`docs/…`, `results/…`, `lengthx/…`, `scripts/…`,
`tests/…`, written from the repository root in every file) names a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# a named file of the checkout: no wildcard or placeholder, not a `../` link target, not what a run writes
# (results/local/ is git-ignored)
PATH = re.compile(r"(?<![\w./-])((?:docs|results|lengthx|scripts|tests)/[\w./+-]*\.(?:md|py|yaml|csv|json|jsonl|png|"
                  r"txt|toml|xz|cpp))\b")


def names(path: Path) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in path]


@pytest.mark.parametrize("name", names(FILES))
def test_every_relative_link_resolves_from_its_file(name):
    md = ROOT / name
    broken = []
    for target in LINK.findall(md.read_text(encoding="utf-8")):
        target = target.split("#", 1)[0]
        if target and not target.startswith(("http://", "https://", "mailto:")) and not (md.parent / target).exists():
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("name", names(FILES))
def test_every_repository_path_named_in_the_text_exists(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    missing = [p for p in PATH.findall(text) if not p.startswith("results/local/") and not (ROOT / p).exists()]
    assert missing == []


def test_the_readme_links_every_doc_in_its_index():
    """The README's "Where to read on" links every file of docs/, so a moved reference is never orphaned."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = readme.split("\n## Where to read on", 1)[1].split("\n## ", 1)[0]
    linked = set(LINK.findall(index))
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} <= linked
