"""Where the lookup stand-in's snapshots look (docs/mini-t5-lookup.md): attention on held-out
records of two lines, teacher-forced on the target ``"<idx> is <n>"``.

A lookup by key needs two steps (Olsson et al. 2022; Bietti et al. 2023): in the encoder, each line's number takes
in its own key; in the decoder, the step that writes the number attends to the number whose key it has just
echoed. Two shares measure them, each averaged over the records, per layer and head:

* **cross**: at the decoder step that writes the number's first token, the cross-attention on the asked line's
  number over that on both lines' numbers. A lookup puts it near 1 in some head; a model that takes either
  number, whichever line is asked, near 0.5 in every head;
* **first line**: the same cross-attention, on the first line's number over that on both. Near 0 or 1 in a head
  whose cross share sits at the share of records asking the first (or second) line: a head that picks a number
  by its place, not by its key;
* **encoder**: at each line's number (its first token), the self-attention on its own line's key over that on
  both lines' keys. A head that binds a number to its key puts it near 1. Position alone can do this (a line's
  key is a fixed distance before its number in the one-piece form), so a high share is necessary, not sufficient;
  and only the direct attention is measured, not a key that reaches the number through the tokens between.

Beside each share, its **mass**: the attention on both numbers (cross) or both keys (encoder), so that a share of
attention too thin to matter can be told apart. Records come from the trainer's own builder
(:func:`lookup_errors.records`) at seeds no study, card or other report uses (``attention:<i>``).

With ``--cache DIR``, each snapshot's shares are kept in ``DIR/<variant>-<step>.json`` (:class:`kept.Kept`, field
``shares``), keyed by its weights and the records measured, so a rerun over every snapshot measures only a new
snapshot or form, and a committed table can be checked against its kept shares.

    .venv/bin/python scripts/studies/lookup_attention.py results/mini-t5-lookup/snapshots/pieces/step-12000 --out a.md
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from kept import SnapshotResults
from lookup_errors import LINE, records
from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

from lengthx.minis.lookup_data import FORMS

KINDS = ("encoder", "cross", "first line")
MASS_OF = {"first line": "cross"}  # the first line's share is of the same mass as the asked line's


@dataclass(frozen=True)
class Places:
    """Character spans of a two-line record: each line's key and number in the prompt (line order), the number in
    the target, and the asked line's place (from 0)."""

    keys: list[tuple[int, int]]
    numbers: list[tuple[int, int]]
    answer: tuple[int, int]
    asked: int


def places(prompt: str, target: str) -> Places:
    """Where the keys and numbers of ``prompt`` and the number of ``target`` (``"<idx> is <n>"``) are."""
    lines = list(LINE.finditer(prompt))
    start = target.rindex(" is ") + len(" is ")
    asked = [m.group(1) for m in lines].index(target[: target.rindex(" is ")])
    return Places([m.span(1) for m in lines], [m.span(2) for m in lines], (start, len(target)), asked)


def token_positions(offsets: list[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    """The tokens whose characters overlap ``span`` (offsets as the fast tokenizer returns them)."""
    return [i for i, (a, b) in enumerate(offsets) if b > a and a < span[1] and b > span[0]]


def share(attn: torch.Tensor, at: int, asked: list[int], other: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(share, mass) per head of ``attn`` ([heads, queries, keys]) from query ``at``: the mass on ``asked`` over the
    mass on ``asked`` and ``other``, and that mass."""
    row = attn[:, at]
    mine, theirs = row[:, asked].sum(-1), row[:, other].sum(-1)
    mass = mine + theirs
    return mine / mass.clamp_min(1e-12), mass


@torch.no_grad()
def measure(model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast,
            held_out: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    """Mean ``encoder``, ``cross`` and ``first line`` shares and the masses of the first two (``"<share> mass"``;
    the first line's share is of the cross mass), [layers, heads] each, over ``held_out``: (prompt, target) of
    records of two lines (:func:`lookup_errors.records`)."""
    sums: dict[str, torch.Tensor] = {}
    for prompt, target in held_out:
        where = places(prompt, target)
        enc = tok(prompt, return_offsets_mapping=True, return_tensors="pt")
        lab = tok(target, return_offsets_mapping=True, return_tensors="pt")
        p_off, t_off = enc.pop("offset_mapping")[0].tolist(), lab.pop("offset_mapping")[0].tolist()
        keys = [token_positions(p_off, s) for s in where.keys]
        numbers = [token_positions(p_off, s) for s in where.numbers]
        step, asked = token_positions(t_off, where.answer)[0], where.asked
        out = model(**enc, labels=lab["input_ids"], output_attentions=True)
        cross = [share(a[0], step, numbers[asked], numbers[1 - asked]) for a in out.cross_attentions]
        first = [share(a[0], step, numbers[0], numbers[1])[0] for a in out.cross_attentions]
        encoder = [[share(a[0], numbers[line][0], keys[line], keys[1 - line]) for line in (0, 1)]
                   for a in out.encoder_attentions]
        rows = {"cross": torch.stack([s for s, _ in cross]), "cross mass": torch.stack([m for _, m in cross]),
                "first line": torch.stack(first),
                "encoder": torch.stack([(a[0] + b[0]) / 2 for a, b in encoder]),
                "encoder mass": torch.stack([(a[1] + b[1]) / 2 for a, b in encoder])}
        for k, v in rows.items():
            sums[k] = sums.get(k, 0) + v
    return {k: v / len(held_out) for k, v in sums.items()}


def table(name: str, form: str, m: dict[str, torch.Tensor]) -> list[str]:
    """One row per (kind, layer): each head's share, with its mass in brackets."""
    rows = []
    for kind in KINDS:
        for layer, (s, mass) in enumerate(zip(m[kind], m[f"{MASS_OF.get(kind, kind)} mass"], strict=True)):
            cells = " | ".join(f"{a:.2f} ({b:.2f})" for a, b in zip(s.tolist(), mass.tolist(), strict=True))
            rows.append(f"| {name} | {form} | {kind} | {layer} | {cells} |")
    return rows


class Shares(SnapshotResults):
    """One snapshot's tokenizer and attention shares (:func:`measure`, eager attention), measured once per list of
    records and, with a ``path``, kept there (:class:`kept.SnapshotResults`, field ``shares``). With ``kept_only``,
    shares not kept raise :class:`LookupError` instead of being measured."""

    def __init__(self, snapshot: Path, path: Path | None = None, kept_only: bool = False):
        super().__init__(snapshot, path, "shares", kept_only, attention="eager")

    def of(self, held_out: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
        """The shares over ``held_out`` ((prompt, target) of two-line records): kept ones, or measured (and kept)."""
        kept = self.kept.get(["attention", held_out], lambda: self._measure(held_out))
        return {k: torch.tensor(v) for k, v in kept.items()}

    def _measure(self, held_out: list[tuple[str, str]]) -> dict[str, list]:
        self.computed += 1
        return {k: v.tolist() for k, v in measure(self.model, self.tok, held_out).items()}


def report(snapshots: list[Path], n: int, l_tr: int, fmt: str, forms: list[str], cache: Path | None = None,
           say: Callable[[str], None] = lambda row: None, kept_only: bool = False) -> tuple[str, int]:
    """(attention.md's text, snapshot-forms measured rather than read from ``cache``) for ``snapshots``; ``say``
    gets each row as it is made; ``kept_only``: read every share from ``cache`` (:class:`Shares`)."""
    heads = T5Config.from_pretrained(snapshots[0], trust_remote_code=False).num_heads
    out = ["# Where the lookup stand-in's snapshots look\n\nWritten by `scripts/studies/lookup_attention.py` "
           f"({n} held-out records of two lines at L_tr = {l_tr}, teacher-forced; the shares are defined in its "
           "docstring). Each cell: a head's share (its mass).\n",
           "| snapshot | form | attention | layer | " + " | ".join(f"head {h}" for h in range(heads)) + " |",
           "|---|---|---|---|" + "---|" * heads]
    measured = 0
    for snap in snapshots:
        shares = Shares(snap, cache / f"{snap.parent.name}-{snap.name}.json" if cache else None, kept_only)
        for form in forms:
            m = shares.of(records(shares.tok, 2, n, l_tr, fmt, form, seed="attention:{i}"))
            for row in table(f"{snap.parent.name}/{snap.name}", form, m):
                out.append(row)
                say(row)
        measured += shares.computed
    return "\n".join(out) + "\n", measured


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("snapshots", nargs="+", type=Path)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--l-tr", type=int, default=256)
    p.add_argument("--format", default="short")
    p.add_argument("--forms", nargs="+", choices=FORMS, default=["one-piece"])
    p.add_argument("--out", type=Path, help="the Markdown file to write (default: the rows on stdout only)")
    p.add_argument("--cache", type=Path, help="a folder keeping each snapshot's shares (kept.Kept; default: none)")
    args = p.parse_args()
    torch.set_num_threads(1)
    text, measured = report(args.snapshots, args.n, args.l_tr, args.format, args.forms, args.cache,
                            say=lambda row: print(row, flush=True))
    print(f"{measured} snapshot-forms measured")
    if args.out:  # written whole at the end, so a stopped run leaves the last table in place
        args.out.write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
