"""What a report computed from one snapshot's weights, kept as JSON so that a rerun over every snapshot computes
only for a new snapshot or new records, and so that a committed table can be checked against the committed
snapshots without computing it again (docs/mini-t5-lookup.md).

A file is ``{"weights": <sha256 of model.safetensors>, <field>: {<sha256 of what was asked>: <result>}}``. A file
written for other weights is ignored and replaced; a result is keyed by everything it was computed from (the
records, the options), so changed records are computed afresh, never read from an old entry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerFast, T5ForConditionalGeneration


class Kept:
    """One snapshot's kept results under ``field`` of the JSON file ``path`` (none kept without a path). With
    ``kept_only``, a result not kept raises :class:`LookupError` instead of being computed."""

    def __init__(self, snapshot: Path, path: Path | None, field: str, kept_only: bool = False):
        self.snapshot, self.path, self.field, self.kept_only = snapshot, path, field, kept_only
        self.weights = hashlib.sha256((snapshot / "model.safetensors").read_bytes()).hexdigest()
        kept = json.loads(path.read_text()) if path is not None and path.exists() else {}
        self.entries: dict[str, Any] = kept.get(field, {}) if kept.get("weights") == self.weights else {}

    def get(self, asked: Any, compute: Callable[[], Any]) -> Any:
        """The result for ``asked`` (anything JSON can write: what the result is computed from): kept, or
        ``compute()``'s (JSON-writable), kept now."""
        key = hashlib.sha256(json.dumps(asked).encode()).hexdigest()
        if key not in self.entries:
            if self.kept_only:
                raise LookupError(f"{self.path or self.snapshot}: no {self.field} kept for these records (or these "
                                  "weights)")
            self.entries[key] = compute()
            if self.path is not None:  # written whole, then renamed: a stopped run leaves the old file
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"weights": self.weights, self.field: self.entries}, indent=0) + "\n")
                tmp.replace(self.path)
        return self.entries[key]


class SnapshotResults:
    """One snapshot's tokenizer, its model (loaded on first use only: fp32, eval mode, ``attention`` as the attention
    implementation where given) and its results kept under ``field`` of ``path`` (:class:`Kept`); ``computed``
    counts the results computed rather than read."""

    def __init__(self, snapshot: Path, path: Path | None, field: str, kept_only: bool = False,
                 attention: str | None = None):
        self.snapshot, self.attention = snapshot, attention
        self.tok = PreTrainedTokenizerFast.from_pretrained(snapshot, trust_remote_code=False)
        self.kept = Kept(snapshot, path, field, kept_only)
        self.computed = 0
        self._model: T5ForConditionalGeneration | None = None

    @property
    def model(self) -> T5ForConditionalGeneration:
        if self._model is None:
            extra = {"attn_implementation": self.attention} if self.attention else {}
            self._model = T5ForConditionalGeneration.from_pretrained(self.snapshot, dtype=torch.float32,
                                                                     trust_remote_code=False, **extra).eval()
        return self._model
