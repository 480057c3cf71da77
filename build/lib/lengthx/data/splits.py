"""Held-out splits of the offline corpora: a document is a test document by a hash of its id (a path).

The split is stable across runs, machines and Python versions that ship the same file, so a mini trained on
the ``train`` documents is always scored on documents it never saw (paper B's continued training and
perplexity; paper A's ``lm`` and ``code_completion`` tasks in the mini profile).
"""

from __future__ import annotations

import hashlib

TEST_PERCENT = 10.0  # the share of documents held out, in percent


def is_test_document(doc_id: str, test_percent: float = TEST_PERCENT) -> bool:
    """Held-out split by a hash of the document id (a file path): stable across runs and machines."""
    bucket = int(hashlib.sha256(doc_id.encode()).hexdigest()[:8], 16) % 10_000
    return bucket < test_percent * 100


def in_split(doc_id: str, split: str, test_percent: float = TEST_PERCENT) -> bool:
    """Whether ``doc_id`` belongs to ``split``: ``train``, ``test`` or ``all``."""
    if split == "all":
        return True
    if split not in ("train", "test"):
        raise ValueError(f"split must be train, test or all, got {split!r}")
    return is_test_document(doc_id, test_percent) == (split == "test")
