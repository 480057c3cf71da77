"""Shipping a study's picked snapshot as the package's stand-in (docs/mini-t5-study.md): both retrieval stand-in
studies pick a snapshot by their own rule and hand it here with the card section that says why."""

from __future__ import annotations

import shutil
from pathlib import Path

SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "curve.json")


def ship_snapshot(snapshot: Path, target: Path, section: str) -> None:
    """Copy ``snapshot``'s :data:`SHIPPED_FILES` into ``target`` and its card (README.md) with ``section`` appended;
    weight files of an earlier export there (other shards, an index, a runs list) are removed first."""
    missing = [name for name in (*SHIPPED_FILES, "README.md") if not (snapshot / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{snapshot} is not a complete snapshot (no {', '.join(missing)}): nothing shipped")
    target.mkdir(parents=True, exist_ok=True)
    for old in [*target.glob("*.safetensors"), target / "model.safetensors.index.json", target / "runs.json"]:
        old.unlink(missing_ok=True)
    for name in SHIPPED_FILES:
        shutil.copyfile(snapshot / name, target / name)
    card = (snapshot / "README.md").read_text()
    (target / "README.md").write_text(card.rstrip("\n") + "\n" + section)
