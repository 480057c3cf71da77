#!/usr/bin/env python3
"""Build an offline English-prose corpus from pinned Debian documentation packages (one document per file).

Paper B's minis are pre-trained on Python standard-library *code*; domain adaptation (one epoch of continued
pre-training on another domain) needs a second domain that every fresh Debian machine can obtain the same way.
This script:

1. downloads pinned ``.deb`` files with ``apt-get download PKG=VERSION`` into a cache directory (no root
   needed; the apt lists must be current, ``apt-get update``), or reuses them from the cache;
2. checks each file's sha256 against the pinned value (a mismatch is an error: the text would differ);
3. extracts them with ``dpkg-deb -x``;
4. converts the English HTML (DocBook/Publican output) to plain text with :mod:`html.parser` only, dropping
   navigation, tables of contents, tables and ``<pre>`` blocks (shell sessions, listings), and cleans the
   reST sources of the Python documentation (drops directives, literal blocks and markup roles);
5. writes one ``.txt`` per document to the output directory and prints a summary (JSON with ``--json``).

The output is deterministic for given package versions: files are processed in sorted order and the text
depends only on the package contents. Standard library only.

    python build_corpus.py --out corpus --cache debs
    python build_corpus.py --sources debian-handbook,debian-reference-en   # a subset
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path


# =========================================================================================================
# Sources
# =========================================================================================================
@dataclass(frozen=True)
class DebSource:
    """One pinned Debian package and how to turn its files into documents."""

    name: str  # short name, the prefix of every document file
    package: str
    version: str
    sha256: str  # of the .deb
    license: str
    root: str  # directory inside the extracted package
    glob: str  # files under root, relative glob
    kind: str  # "html" or "rst"
    exclude: tuple[str, ...] = ()  # relative paths (or directory prefixes ending in "/") to skip
    split_level: int | None = None  # html: also split a file into one document per <hN> section


DEBIAN_RELEASE = "bookworm"  # Debian 12; versions below are those of bookworm's main archive

SOURCES: tuple[DebSource, ...] = (
    DebSource(
        name="debian-handbook",
        package="debian-handbook",
        version="11.20220922",
        sha256="3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa",
        license="GPL-2.0+ or CC-BY-SA-3.0",
        root="usr/share/doc/debian-handbook/html/en-US",
        glob="*.html",
        kind="html",
        exclude=("index.html",),  # the table of contents
    ),
    DebSource(
        name="debian-reference",
        package="debian-reference-en",
        version="2.100",
        sha256="9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f",
        license="GPL-2.0+",
        root="usr/share/debian-reference",
        glob="*.en.html",
        kind="html",
        exclude=("index.en.html",),
        split_level=2,  # 15 long chapters -> one document per section (N.M)
    ),
    DebSource(
        name="debian-policy",
        package="debian-policy",
        version="4.6.2.0",
        sha256="ef9d01b625c3b87c3a845c2cd1b66f1a16e9240b2b9e5bee53472a00e8457a39",
        license="GPL-2.0+",
        root="usr/share/doc/debian-policy/policy.html/_sources",
        glob="*.rst.txt",
        kind="rst",
        exclude=("index.rst.txt",),
    ),
    DebSource(
        name="developers-reference",
        package="developers-reference",
        version="12.18",
        sha256="0dba82f6fa16e373f2a84ad07e7971aa9264ad2e7d2ae46b37edbc9c5fd57e2e",
        license="GPL-2.0",
        root="usr/share/developers-reference/_sources",
        glob="*.rst.txt",
        kind="rst",
        exclude=("index.rst.txt",),
    ),
    DebSource(
        name="debian-faq",
        package="debian-faq",
        version="11.1",
        sha256="427426e0cfa6888622fc1d72631071cb4b5a1f86ccde722e7820bcef284de5d0",
        license="verbatim-copying permission notice (GPL-style; see its copyright file)",
        root="usr/share/doc/debian/FAQ",
        glob="*.en.html",
        kind="html",
        exclude=("index.en.html",),
    ),
    DebSource(
        name="python-doc",
        package="python3.11-doc",
        version="3.11.2-6+deb12u8",
        sha256="50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b",
        license="PSF-2.0",
        root="usr/share/doc/python3.11/html/_sources",
        glob="**/*.rst.txt",
        kind="rst",
        # the API reference (library/, c-api/) is mostly signatures about the mini's own pre-training domain;
        # keep the narrative parts
        exclude=("library/", "c-api/", "includes/", "contents.rst.txt", "glossary.rst.txt", "bugs.rst.txt",
                 "copyright.rst.txt", "license.rst.txt", "about.rst.txt"),
    ),
)

MIN_CHARS = 1500  # shorter documents (stubs, section headers) are dropped


# =========================================================================================================
# HTML -> text
# =========================================================================================================
BLOCK_TAGS = frozenset(
    "p div li dt dd h1 h2 h3 h4 h5 h6 br tr blockquote section article ul ol dl table title".split()
)
SKIP_TAGS = frozenset(("head", "script", "style", "pre", "table", "noscript", "svg"))
SKIP_CLASSES = frozenset(("docnav", "navheader", "navfooter", "toc", "list-of-tables", "list-of-figures",
                          "indexterm", "footnotes", "legalnotice"))
SKIP_IDS = frozenset(("banner", "title", "site_footer"))
VOID_TAGS = frozenset("area base br col embed hr img input link meta param source track wbr".split())
SECTION_MARK = "\x00SECTION\x00"


class _TextExtractor(HTMLParser):
    """Visible text of an HTML page, one paragraph per block element, markup and navigation dropped."""

    def __init__(self, split_level: int | None = None) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.stack: list[tuple[str, bool]] = []  # (tag, starts a skipped subtree)
        self.skip_depth = 0
        self.split_tag = f"h{split_level}" if split_level else None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID_TAGS:
            if tag == "br" and not self.skip_depth:
                self.parts.append("\n")
            return
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        skip = tag in SKIP_TAGS or bool(classes & SKIP_CLASSES) or a.get("id") in SKIP_IDS
        self.stack.append((tag, skip))
        if skip:
            self.skip_depth += 1
        elif not self.skip_depth:
            if tag == self.split_tag:
                self.parts.append(SECTION_MARK)
            if tag in BLOCK_TAGS:
                self.parts.append("\n\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br" and not self.skip_depth:
            self.parts.append("\n")  # <a id="x"/> and friends: nothing to push on the stack

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_TAGS:
            return
        # pop to the matching tag (tolerates unclosed inline elements)
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                for _, skip in self.stack[i:]:
                    if skip:
                        self.skip_depth -= 1
                del self.stack[i:]
                break
        if not self.skip_depth and tag in BLOCK_TAGS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self.skip_depth:
            self.parts.append(data)

    def text(self) -> str:
        return "".join(self.parts)


def normalise_paragraphs(text: str) -> str:
    """Collapse whitespace inside paragraphs; paragraphs separated by one blank line."""
    paras = (re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text))
    return "\n\n".join(p for p in paras if p) + "\n"


def html_to_documents(raw: str, split_level: int | None = None) -> list[str]:
    """Plain-text documents of an HTML page: one, or one per ``<h{split_level}>`` section (preamble dropped
    when it is too short to stand alone)."""
    parser = _TextExtractor(split_level)
    parser.feed(raw)
    parser.close()
    chunks = parser.text().split(SECTION_MARK)
    if split_level and len(chunks) > 1:
        chunks = chunks[1:] if len(chunks[0].strip()) < MIN_CHARS else chunks
    return [normalise_paragraphs(c) for c in chunks]


# =========================================================================================================
# reST -> text
# =========================================================================================================
_ROLE = re.compile(r":[\w:.+-]+:`~?!?([^`<]*?)(?:\s*<[^`>]*>)?`")  # :func:`~os.path.join` -> os.path.join
_LINK = re.compile(r"`([^`<]+?)\s*<[^`>]+>`_{1,2}")  # `text <url>`_ -> text
_REF = re.compile(r"`([^`]+)`_{1,2}")  # `text`_ -> text
_LITERAL = re.compile(r"``([^`]+)``")
_EMPH = re.compile(r"\*\*?([^*\s][^*]*?)\*\*?")
_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+<>.:_])\1{2,}\s*$")
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::(.*)$")
_COMMENT = re.compile(r"^(\s*)\.\.(\s|$)")
_FIELD = re.compile(r"^\s*:[\w -]+:(\s|$)")
_TABLE_ROW = re.compile(r"^\s*(\+[-=+]+\+|\|.*\||=+(\s+=+)+)\s*$")  # grid-table rows/borders, simple-table rules
# directives whose body is prose (kept, dedented); all others (code, tables, toctree, …) are dropped whole
_PROSE_DIRECTIVES = frozenset(
    "note warning seealso versionadded versionchanged deprecated tip important hint caution attention "
    "impl-detail rubric topic sidebar".split()
)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def rst_to_text(raw: str) -> str:
    """Prose of a reST source: directives other than admonitions, literal blocks (``::``), comments,
    field lists and section underlines dropped; inline markup reduced to its text."""
    out: list[str] = []
    lines = raw.expandtabs(8).splitlines()
    skip_deeper_than: int | None = None  # drop lines indented more than this (a block's body)
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if skip_deeper_than is not None:
            if not line.strip() or _indent(line) > skip_deeper_than:
                continue
            skip_deeper_than = None
        if _UNDERLINE.match(line):
            out.append("")
            continue
        m = _DIRECTIVE.match(line)
        if m:
            name = m.group(2).split(":")[-1]
            if name in _PROSE_DIRECTIVES:
                arg = m.group(3).strip()
                if arg and name in ("rubric", "topic", "sidebar", "deprecated", "versionadded",
                                    "versionchanged"):
                    out.append("" if name in ("rubric", "topic", "sidebar") else arg)
                continue  # the body is kept (its options are dropped by the field rule)
            out.append("")
            skip_deeper_than = _indent(line)
            continue
        if _COMMENT.match(line):
            skip_deeper_than = _indent(line)
            continue
        if _FIELD.match(line) or _TABLE_ROW.match(line):
            continue
        stripped = line.rstrip()
        if stripped.endswith("::"):  # a literal block follows
            text = stripped[:-2].rstrip()
            out.extend([text + (":" if text and not text.endswith(":") else ""), ""])
            skip_deeper_than = _indent(line)
            continue
        if stripped.lstrip().startswith(">>>"):  # doctest block without '::'
            out.append("")
            skip_deeper_than = _indent(line) - 1
            continue
        out.append(line.strip())
    text = "\n".join(out)
    for pattern, repl in ((_ROLE, r"\1"), (_LINK, r"\1"), (_REF, r"\1"), (_LITERAL, r"\1"), (_EMPH, r"\1")):
        text = pattern.sub(repl, text)
    return normalise_paragraphs(text)


# =========================================================================================================
# Fetching
# =========================================================================================================
def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def deb_filename(src: DebSource) -> str:
    """``apt-get download``'s file name (an epoch's ``:`` is written ``%3a``)."""
    return f"{src.package}_{src.version.replace(':', '%3a')}_all.deb"


def fetch_deb(src: DebSource, cache: Path) -> Path:
    """The pinned ``.deb`` in ``cache``, downloaded with ``apt-get download`` if absent; sha256 checked."""
    cache.mkdir(parents=True, exist_ok=True)
    deb = cache / deb_filename(src)
    if not deb.is_file():
        cmd = ["apt-get", "download", f"{src.package}={src.version}"]
        proc = subprocess.run(cmd, cwd=cache, capture_output=True, text=True)
        if proc.returncode != 0 or not deb.is_file():
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}\n"
                f"The corpus is pinned to {src.package} {src.version} ({DEBIAN_RELEASE}); run `apt-get update`, "
                f"or place {deb.name} in {cache} (snapshot.debian.org keeps every version)."
            )
    digest = sha256_of(deb)
    if digest != src.sha256:
        raise RuntimeError(f"{deb}: sha256 {digest} != pinned {src.sha256}; delete it or update the pin")
    return deb


def extract_deb(deb: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(into)], check=True)
    return into


# =========================================================================================================
# Documents
# =========================================================================================================
def _excluded(rel: str, exclude: tuple[str, ...]) -> bool:
    return any(rel == e or (e.endswith("/") and rel.startswith(e)) for e in exclude)


def source_documents(src: DebSource, tree: Path) -> Iterator[tuple[str, str]]:
    """(document name, text) pairs of one extracted package, in a fixed order."""
    root = tree / src.root
    if not root.is_dir():
        raise FileNotFoundError(f"{src.package}: no {src.root} in the package")
    convert: Callable[[str], list[str]]
    if src.kind == "html":
        convert = lambda raw: html_to_documents(raw, src.split_level)  # noqa: E731
    elif src.kind == "rst":
        convert = lambda raw: [rst_to_text(raw)]  # noqa: E731
    else:
        raise ValueError(f"unknown kind {src.kind!r}")
    for path in sorted(root.glob(src.glob)):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or _excluded(rel, src.exclude):
            continue
        stem = re.sub(r"\.(rst\.txt|en\.html|html)$", "", rel).replace("/", "__")
        docs = convert(path.read_text(encoding="utf-8", errors="replace"))
        for n, text in enumerate(docs):
            name = f"{src.name}__{stem}" + (f"__{n:02d}" if len(docs) > 1 else "")
            yield name, text


@dataclass
class SourceSummary:
    name: str
    package: str
    version: str
    sha256: str
    license: str
    documents: int = 0
    chars: int = 0
    dropped_short: int = 0


def build(out: Path, cache: Path, names: list[str] | None = None, clean: bool = True) -> list[SourceSummary]:
    """Write the corpus to ``out`` (one ``<source>__<doc>.txt`` per document); returns per-source counts."""
    chosen = [s for s in SOURCES if names is None or s.name in names]
    unknown = set(names or ()) - {s.name for s in SOURCES}
    if unknown:
        raise ValueError(f"unknown source(s) {sorted(unknown)}; valid: {[s.name for s in SOURCES]}")
    if clean and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="prose-corpus-") as tmp:
        for src in chosen:
            tree = extract_deb(fetch_deb(src, cache), Path(tmp) / src.name)
            summary = SourceSummary(src.name, src.package, src.version, src.sha256, src.license)
            for name, text in source_documents(src, tree):
                if len(text) < MIN_CHARS:
                    summary.dropped_short += 1
                    continue
                (out / f"{name}.txt").write_text(text, encoding="utf-8")
                summary.documents += 1
                summary.chars += len(text)
            summaries.append(summary)
    return summaries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("corpus"), help="output directory (recreated)")
    ap.add_argument("--cache", type=Path, default=Path("debs"), help="where the .deb files are kept")
    ap.add_argument("--sources", default=None, help=f"comma-separated subset of {[s.name for s in SOURCES]}")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)
    names = [s for s in args.sources.split(",") if s] if args.sources else None
    summaries = build(args.out, args.cache, names)
    if args.json:
        print(json.dumps([s.__dict__ for s in summaries], indent=2))
        return 0
    for s in summaries:
        print(f"{s.name:18} {s.package}={s.version}  {s.documents:4d} docs  {s.chars:>9,d} chars  "
              f"({s.dropped_short} short dropped)  {s.license}")
    print(f"{'total':18} {sum(s.documents for s in summaries):4d} docs  "
          f"{sum(s.chars for s in summaries):>9,d} chars -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
