"""Checks of committed artifacts and docs (tests/artifacts/README.md): they fail when the committed results,
checkpoints or docs are out of step with the code, not when the code breaks."""

from __future__ import annotations

import re
from pathlib import Path

import lengthx

ROOT = Path(__file__).resolve().parents[2]


def test_docs_api_lists_every_public_name_with_its_paper_reference():
    """docs/api.md has one row per public name, each citing the paper section (or the docs) it implements."""
    rows = {}
    for line in (ROOT / "docs" / "api.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `([A-Za-z_0-9]+)[(`]", line)
        if m:
            rows[m.group(1)] = line
    assert set(lengthx.__all__) <= set(rows), sorted(set(lengthx.__all__) - set(rows))
    for name in lengthx.__all__:
        assert re.search(r"(paper [AB]|docs/)", rows[name]), rows[name]


def readme_python_api_code() -> str:
    """The code block of the README's "Python API" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Python API", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0]


def test_readme_example_is_ten_to_fifteen_lines():
    lines = [line for line in readme_python_api_code().splitlines() if line.strip() and not line.startswith("#")]
    assert 10 <= len(lines) <= 15, len(lines)
