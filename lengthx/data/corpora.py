"""Documents of the corpora (paper B §4.1; docs/design.md §5): arXiv ``scientific_papers`` (paper profile),
the Python standard library's own source (the offline corpus of code: paper B's minis, paper A's offline
code tasks), any local text via ``data.files=`` (files, directories or globs), or a ``.tar.xz`` of text
documents via ``data.archive=`` (the mini profile's prose, ``corpora/``). Held-out files are chosen by a hash of
their path relative to the corpus root (:mod:`lengthx.data.splits`), so a split does not depend on where the
corpus lies.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lengthx.data.hub import load_hub_dataset
from lengthx.data.splits import in_split, is_test_document

if TYPE_CHECKING:
    from datasets import Dataset

log = logging.getLogger("lengthx.train")


SOURCES = ("stdlib", "files", "archive", "scientific_papers")


def _doc_order(doc_id: str) -> str:
    return hashlib.sha256(("order:" + doc_id).encode()).hexdigest()




# ---- the Python standard library: the one offline corpus of code ------------------------------------------
# Which files a corpus reads (each rule fixed since the checkpoints trained on it were made):
# - "all": every module but installed packages: paper B's minis and ``lengthx train``'s mini corpus;
# - "code": the code tasks' files (paper A §5.4 offline), no tests, encodings tables or generated modules;
# - "no-tests": mini-t5's tokenizer and filler text (``scripts/train_mini_t5.py``).
_PACKAGES = frozenset({"site-packages", "dist-packages", "__pycache__"})
_CODE_SKIP_DIRS = _PACKAGES | {"test", "tests", "idle_test", "encodings", "pydoc_data", "turtledemo", "ensurepip"}
_CODE_SKIP_PREFIXES = ("_sysconfigdata", "config-", "this.py", "test_")
_NO_TESTS_SKIP_DIRS = _PACKAGES | {"test", "tests", "idlelib", "lib2to3"}
STDLIB_RULES = ("all", "code", "no-tests")


def _kept(rel: Path, rule: str) -> bool:
    if rule == "all":
        return not _PACKAGES.intersection(rel.parts)
    if rule == "no-tests":
        return not _NO_TESTS_SKIP_DIRS.intersection(rel.parts)
    if rule == "code":
        dirs = rel.parts[:-1]
        return not any(d in _CODE_SKIP_DIRS or d.startswith("test") for d in dirs) \
            and not rel.name.startswith(_CODE_SKIP_PREFIXES)
    raise ValueError(f"unknown standard-library rule {rule!r}; valid: {', '.join(STDLIB_RULES)}")


def stdlib_files(root: str | Path | None = None, rule: str = "all") -> list[Path]:
    """The ``.py`` files of the Python standard library (``sysconfig``'s stdlib path) kept by ``rule``, sorted."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    return sorted(p for p in base.rglob("*.py") if _kept(p.relative_to(base), rule))


@lru_cache(maxsize=4)
def stdlib_sources(root: str | None = None) -> tuple[tuple[str, str], ...]:
    """(relative path, source) of the code tasks' standard-library files (rule ``code``), sorted by path.

    Files that are not UTF-8 or are empty are skipped. The set depends on the Python version (recorded in
    each example's meta).
    """
    base = Path(root or sysconfig.get_paths()["stdlib"])
    out = []
    for path in stdlib_files(base, "code"):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            out.append((path.relative_to(base).as_posix(), text))
    if not out:
        raise FileNotFoundError(f"no Python sources found under the standard library at {base}")
    return tuple(out)


def _select(
    docs: list[tuple[str, Path]], split: str, test_percent: float, max_docs: int | None
) -> list[tuple[str, Path]]:
    if split not in ("train", "test"):
        raise ValueError(f"split must be train or test, got {split!r}")
    keep = [d for d in docs if is_test_document(d[0], test_percent) == (split == "test")]
    keep.sort(key=lambda d: _doc_order(d[0]))  # a fixed pseudo-random order, so max_docs is a fair sample
    return keep[:max_docs] if max_docs else keep


def _documents_dataset(items: list[tuple[str, str]]):
    from datasets import Dataset

    return Dataset.from_dict({"id": [i for i, _ in items], "text": [t for _, t in items]})


def stdlib_documents(
    split: str, test_percent: float = 10.0, max_docs: int | None = None, root: str | None = None
) -> Dataset:
    """Mini-profile corpus: one document per standard-library source file; test files are held out."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    docs = [(str(p.relative_to(base)), p) for p in stdlib_files(base)]
    chosen = _select(docs, split, test_percent, max_docs)
    items = [(i, p.read_text(encoding="utf-8", errors="replace")) for i, p in chosen]
    return _documents_dataset(items)


def expand_files(files: list[str]) -> tuple[Path, list[Path]]:
    """(common root, sorted files) of ``data.files`` entries: files, directories (every ``*.txt`` below) or
    glob patterns. A missing entry is an error naming it."""
    import glob as globlib

    paths: set[Path] = set()
    for entry in files:
        p = Path(entry).expanduser()
        if p.is_dir():
            found = [q for q in p.rglob("*.txt") if q.is_file()]
        elif p.is_file():
            found = [p]
        else:
            found = [Path(q) for q in globlib.glob(str(p), recursive=True) if Path(q).is_file()]
        if not found:
            raise FileNotFoundError(f"data.files: {entry} is no file, no directory with *.txt files and no glob "
                                    "that matches a file; fix the path")
        paths.update(q.resolve() for q in found)
    ordered = sorted(paths)
    root = Path(os.path.commonpath(ordered)) if len(ordered) > 1 else ordered[0].parent
    return root, ordered


def file_documents(
    files: list[str],
    split: str,
    test_percent: float = 10.0,
    max_docs: int | None = None,
    sample_by: str = "document",
    cache_dir: str | None = None,
) -> Dataset:
    """Any local text, read with ``datasets.load_dataset("text", …)``.

    With ``sample_by=document`` each file is one document and files are split train/test by a hash of
    their path relative to the files' common root; with ``line``/``paragraph`` the rows of the files are the
    documents, split by a hash of (relative path, row). A single file as a single document cannot be split:
    pass several files, or ``sample_by=paragraph``.
    """
    from datasets import load_dataset

    root, paths = expand_files(files)
    docs = [(p.relative_to(root).as_posix(), p) for p in paths]
    if sample_by == "document":
        chosen = _select(docs, split, test_percent, max_docs)
        if not chosen:
            return _documents_dataset([])
        ds = load_dataset(
            "text",
            data_files=[str(q) for _, q in chosen],
            sample_by="document",
            split="train",
            cache_dir=cache_dir,
        )
        return _documents_dataset([(i, row["text"]) for (i, _), row in zip(chosen, ds, strict=True)])
    items = []
    for rel, p in docs:
        ds = load_dataset("text", data_files=[str(p)], sample_by=sample_by, split="train", cache_dir=cache_dir)
        items += [(f"{rel}#{n}", row["text"]) for n, row in enumerate(ds)]
    keep = [it for it in items if is_test_document(it[0], test_percent) == (split == "test")]
    keep.sort(key=lambda it: _doc_order(it[0]))
    return _documents_dataset(keep[:max_docs] if max_docs else keep)


def cache_root(data_cfg: Any) -> Path:
    """``data.cache_dir``, else ``$LENGTHX_CACHE``, else ``~/.cache/lengthx``."""
    return Path(data_cfg.get("cache_dir") or os.environ.get("LENGTHX_CACHE") or "~/.cache/lengthx").expanduser()


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, read once per (path, size, modification time)."""
    p = Path(path).expanduser().resolve()
    st = p.stat()
    return _sha256_of(str(p), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=16)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def extract_archive(archive: str | Path, cache: Path, sha256: str | None = None) -> Path:
    """The directory the ``.tar.xz`` of documents is extracted to (once, keyed by the archive's sha256)."""
    import tarfile

    path = Path(archive).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data.archive: {path} does not exist (the shipped corpora are package data in "
                                "lengthx/corpora/; reinstall lengthx if it is missing there): pass "
                                "data.archive=/path/to/archive.tar.xz")
    digest = file_sha256(path)
    if sha256 and digest != sha256:
        raise ValueError(f"data.archive: {path} has sha256 {digest}, not the pinned data.archive_sha256={sha256}")
    out = cache / "corpora" / digest[:16]
    if not (out / ".complete").is_file():  # extracted beside, then moved: a torn extraction is never used
        tmp = out.with_name(out.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        with tarfile.open(path, "r:xz") as tar:
            tar.extractall(tmp, filter="data")
        (tmp / ".complete").write_text(digest)
        tmp.replace(out)
    return out


def arxiv_documents(split: str, data_cfg: Any) -> Dataset:
    """Paper-profile corpus: the arXiv part of ``scientific_papers`` (Cohan et al., 2018), field ``article``.

    Uses the dataset's own train/test splits (205k / 7k papers in paper B §4.1). Needs the hub or a local
    ``datasets`` cache; ``data.hf_path`` / ``data.hf_name`` / ``data.hf_revision`` select the copy (recent
    ``datasets`` releases load script-free copies only, e.g. the hub's parquet conversion).
    """
    path = data_cfg.get("hf_path") or "armanc/scientific_papers"
    name = data_cfg.get("hf_name") or "arxiv"
    field_name = data_cfg.get("text_field") or "article"
    kwargs: dict[str, Any] = {}
    if data_cfg.get("cache_dir"):
        kwargs["cache_dir"] = str(Path(data_cfg.cache_dir).expanduser() / "hf")
    if data_cfg.get("hf_revision"):
        kwargs["revision"] = data_cfg.hf_revision
    ds = load_hub_dataset(path, split, (field_name,), config=name, **kwargs,
                          hint="The paper profile needs the hub or a local datasets cache; try "
                               "data.hf_revision=refs/convert/parquet, or point data.source=files "
                               "data.files=[…] at local text.")
    max_docs = data_cfg.get("max_docs")
    if max_docs:
        ds = ds.select(range(min(int(max_docs), len(ds))))
    ds = ds.map(
        lambda row, i: {"id": f"arxiv:{split}:{i}", "text": row[field_name]},
        with_indices=True,
        remove_columns=ds.column_names,
    )
    return ds


def resolve_source(data_cfg: Any, profile: str) -> str:
    """``auto`` → ``files`` when ``data.files`` is set, else stdlib (mini) or scientific_papers (paper)."""
    source = data_cfg.get("source") or "auto"
    if source == "auto":
        if data_cfg.get("files"):
            return "files"
        return "scientific_papers" if profile == "paper" else "stdlib"
    if source not in SOURCES:
        raise ValueError(f"unknown data.source={source!r}; valid: auto, {', '.join(SOURCES)}")
    return source


def load_documents(data_cfg: Any, split: str, profile: str = "mini") -> Dataset:
    """The documents of ``split`` as a ``datasets.Dataset`` with columns ``id`` and ``text``."""
    source = resolve_source(data_cfg, profile)
    test_percent = float(data_cfg.get("test_percent", 10))
    max_docs = data_cfg.get("max_docs")
    if source == "stdlib":
        return stdlib_documents(split, test_percent, max_docs, data_cfg.get("stdlib_root"))
    if source == "files":
        files = data_cfg.get("files")
        if not files:
            raise ValueError("data.source=files needs data.files=[path, …]")
        files = [files] if isinstance(files, str) else list(files)
        hf_cache = str(Path(data_cfg.cache_dir).expanduser() / "hf") if data_cfg.get("cache_dir") else None
        return file_documents(
            files, split, test_percent, max_docs, data_cfg.get("sample_by") or "document", hf_cache
        )
    if source == "archive":
        if not data_cfg.get("archive"):
            raise ValueError("data.source=archive needs data.archive=FILE.tar.xz")
        root = extract_archive(data_cfg.archive, cache_root(data_cfg), data_cfg.get("archive_sha256"))
        return file_documents([str(root)], split, test_percent, max_docs, data_cfg.get("sample_by") or "document",
                              str(cache_root(data_cfg) / "hf"))
    return arxiv_documents(split, data_cfg)








def stdlib_split(split: str = "all") -> tuple[tuple[str, str], ...]:
    """:func:`stdlib_sources` of one held-out split (``train``, ``test`` or ``all``; :mod:`lengthx.data.splits`).

    The mini profile scores ``test`` files: the T5-LM stand-in (``scripts/train_mini_t5_lm.py``) trains on the
    others, so no scored continuation was seen in training."""
    out = tuple((p, t) for p, t in stdlib_sources() if in_split(p, split))
    if not out:
        raise FileNotFoundError(f"the standard library has no source file in split {split!r}")
    return out


def corpus_label(data_cfg: Any, split: str, profile: str = "mini") -> str:
    """What a corpus's documents are, for result rows (:mod:`lengthx.data.provenance`)."""
    from lengthx.data.provenance import file_label, hub_label, stdlib_label

    source = resolve_source(data_cfg, profile)
    if source == "stdlib":
        return stdlib_label(split)
    if source == "archive":
        return file_label(str(data_cfg.archive)) if Path(str(data_cfg.archive)).is_file() else str(data_cfg.archive)
    if source == "files":
        return ",".join(file_label(f, "*.txt") for f in ([data_cfg.files] if isinstance(data_cfg.files, str)
                                                           else list(data_cfg.files)))
    return hub_label(str(data_cfg.get("hf_path") or "scientific_papers"), split)
