"""What the lookup stand-in's snapshots get wrong (docs/mini-t5-lookup.md): greedy answers on
held-out single-question lines records of exactly K lines at L_tr, each sorted into one kind of error.

The target echoes the asked key before its number (``"<idx> is <n>"``), so an answer says which line the model
read. Kinds, first that applies:

* ``right``: the last integer is the asked line's number (the benchmark's rule);
* ``other line``: the last integer is another line's number in the record (a lookup of the wrong line);
* ``near``: the number shares its first or its last token with the asked line's number (numbers are two or three
  tokens in the mini tokenizer: the right line, its number garbled);
* ``near other``: the same, for another line of the record;
* ``no line``: any other number, or none.

Each count gets a ``chance`` row too: the kinds of uniformly random numbers in the form's range given as the
answer to the same records (:data:`CHANCE_DRAWS` per record, shown to a tenth of a point), so that a kind's rate can be read against what matching pieces by luck gives.
Beside the kind: whether the echoed key is the asked one, another line's, or neither. For records of two lines, a
second table splits the answers by the line asked (the first or the second): which line's number the answer is. A
model that looks up by key answers the line asked; one that ignores the key answers alike whichever is asked.
Records come from the trainer's own builder (:func:`lengthx.minis.lookup_data.lookup_record`) at seeds no study or card uses
(``diagnose:<K>:<i>``). Prints one row per snapshot and count as it goes; ``--out`` writes the whole table at the end.

With ``--cache DIR``, each snapshot's greedy answers are kept in ``DIR/<variant>-<step>.json`` (:class:`Answers`),
keyed by the SHA-256 of its weights and of the prompts asked, so a rerun over every snapshot generates only for a
new snapshot, count or form; changed weights or records are generated afresh, never read from an old file.

    .venv/bin/python scripts/studies/lookup_errors.py results/mini-t5-lookup/snapshots/warm/step-08000 --counts 2 6 12 --out errors.md
"""

from __future__ import annotations

import argparse
import hashlib
import random
import re
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import torch
from kept import SnapshotResults
from transformers import PreTrainedTokenizerFast

from lengthx.minis.lookup_data import FORMS, ONE_PIECE_MAX, lookup_record
from lengthx.tasks.lines import MAX_VALUE

KINDS = ("right", "other line", "near", "near other", "no line")
ECHOES = ("asked key", "other key", "no key")
CHANCE_DRAWS = 50  # random answers per record for the chance rows
MAX_NEW_TOKENS = 24
LINE = re.compile(r"line ([^:\n]+): REGISTER_CONTENT is <(\d+)>")  # keys may hold a space ("ad hoc-anniversary")
ASKED = re.compile(r"in line ([^?\n]+)\? I need the number")


@lru_cache(maxsize=1 << 17)
def _number_pieces(tok: PreTrainedTokenizerFast, number: str) -> tuple[str, ...]:
    return tuple(t for t in tok.tokenize(number) if t.strip("▁"))


def near(a: str, b: str, tok: PreTrainedTokenizerFast) -> bool:
    """Whether number ``a`` looks like a garbling of ``b``: the same first or last token."""
    pa, pb = _number_pieces(tok, a), _number_pieces(tok, b)
    return a != b and (pa[0] == pb[0] or pa[-1] == pb[-1])


def classify(answer: str, prompt: str, tok: PreTrainedTokenizerFast) -> tuple[str, str]:
    """(kind, echo) of one answer to one single-question record (module doc)."""
    lines = dict(LINE.findall(prompt))
    asked = ASKED.search(prompt).group(1)
    numbers = re.findall(r"\d+", answer)
    last = numbers[-1] if numbers else ""
    others = [v for k, v in lines.items() if k != asked]
    if last == lines[asked]:
        kind = "right"
    elif last in others:
        kind = "other line"
    elif last and near(last, lines[asked], tok):
        kind = "near"
    elif last and any(near(last, v, tok) for v in others):
        kind = "near other"
    else:
        kind = "no line"
    head = answer.split(" is ")[0].strip()
    echo = "asked key" if head == asked else "other key" if head in lines else "no key"
    return kind, echo


class Answers(SnapshotResults):
    """One snapshot's tokenizer and greedy answers, generated once per list of prompts and, with a ``path``, kept
    there (:class:`kept.SnapshotResults`, field ``answers``, keyed by the prompts asked). With ``kept_only``,
    answers not kept raise :class:`LookupError` instead of being generated (a check that a committed table is what
    its kept answers give)."""

    def __init__(self, snapshot: Path, path: Path | None = None, kept_only: bool = False):
        super().__init__(snapshot, path, "answers", kept_only)

    def of(self, prompts: list[str]) -> list[str]:
        """The answers to ``prompts``: kept ones, or generated (and kept) now."""
        return self.kept.get([MAX_NEW_TOKENS, prompts], lambda: self._generate(prompts))

    @torch.no_grad()
    def _generate(self, prompts: list[str]) -> list[str]:
        out: list[str] = []
        for j in range(0, len(prompts), 32):
            enc = self.tok(prompts[j : j + 32], return_tensors="pt", padding=True)
            out += self.tok.batch_decode(self.model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                                                             num_beams=1), skip_special_tokens=True)
        self.computed += len(prompts)
        return out


def records(tok: PreTrainedTokenizerFast, k: int, n: int, l_tr: int, fmt: str, form: str = "benchmark",
            seed: str = "diagnose:{k}:{i}") -> list[tuple[str, str]]:
    """(prompt, target) of ``n`` held-out single-question records of exactly ``k`` lines in ``form``, the i-th
    drawn at ``seed.format(k=k, i=i)`` (fewer kept ones are drawn again). Built once per tokenizer and arguments:
    every snapshot of a study shares its tokenizer, so a report over all of them builds each set once."""
    memo = (hashlib.sha256(tok.backend_tokenizer.to_str().encode()).hexdigest(), k, n, l_tr, fmt, form, seed)
    if memo not in _RECORDS:
        _RECORDS[memo] = _draw(tok, k, n, l_tr, fmt, form, seed)
    return list(_RECORDS[memo])


_RECORDS: dict[tuple, list[tuple[str, str]]] = {}


def _draw(tok: PreTrainedTokenizerFast, k: int, n: int, l_tr: int, fmt: str, form: str,
          seed: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i = 0
    while len(out) < n:
        prompt, target, kept = lookup_record(tok, l_tr, k, False, random.Random(seed.format(k=k, i=i)), fmt, form)
        i += 1
        if kept == k:
            out.append((prompt, target))
        if i > 20 * n:
            raise SystemExit(f"records of {k} lines rarely fit {l_tr} tokens")
    return out


def diagnose(answers: Answers, prompts: list[str], form: str = "benchmark",
             with_chance: bool = True) -> tuple[Counter, Counter, Counter, Counter]:
    """Counts of kinds and echoes of a snapshot's ``answers`` to ``prompts`` (:func:`records`), the kinds of random
    numbers of that form's range given to the same records (the chance row; empty unless ``with_chance``), and
    the kinds by the asked line's place in the record (``(1, "right")``: the first line asked, its number
    answered)."""
    tok = answers.tok
    kinds: Counter = Counter()
    echoes: Counter = Counter()
    by_place: Counter = Counter()
    chance: Counter = Counter()
    if with_chance:
        rng = random.Random(f"chance:{form}:{len(LINE.findall(prompts[0]))}")  # seeded by form and line count
        most = MAX_VALUE if form == "benchmark" else ONE_PIECE_MAX
        chance.update(classify(str(rng.randint(1, most)), prompt, tok)[0] for prompt in prompts
                      for _ in range(CHANCE_DRAWS))
    for answer, prompt in zip(answers.of(prompts), prompts, strict=True):
        kind, echo = classify(answer, prompt, tok)
        kinds[kind] += 1
        echoes[echo] += 1
        by_place[(asked_place(prompt), kind)] += 1
    return kinds, echoes, chance, by_place


def asked_place(prompt: str) -> int:
    """The asked line's place in the record, from 1."""
    return [k for k, _ in LINE.findall(prompt)].index(ASKED.search(prompt).group(1)) + 1


def place_rows(name: str, form: str, by_place: Counter) -> list[str]:
    """The two-line table's rows for one snapshot and form: per line asked, whose number the answer is."""
    rows = []
    for asked in (1, 2):
        n = sum(v for (place, _), v in by_place.items() if place == asked)
        got = {"first line's": by_place[(asked, "right" if asked == 1 else "other line")],
               "second line's": by_place[(asked, "right" if asked == 2 else "other line")]}
        cells = [f"{100 * v / n:.0f}%" if n else "" for v in (*got.values(), n - sum(got.values()))]
        rows.append(f"| {name} | {form} | {('first', 'second')[asked - 1]} | {n} | " + " | ".join(cells) + " |")
    return rows


def report(snapshots: list[Path], counts: list[int], n: int, l_tr: int, fmt: str, forms: list[str],
           cache: Path | None = None, say: Callable[[str], None] = lambda row: None,
           kept_only: bool = False) -> tuple[str, int]:
    """(errors.md's text, answers generated rather than read from ``cache``) for ``snapshots``; ``say`` gets each
    row as it is made; ``kept_only``: read every answer from ``cache`` (:class:`Answers`)."""
    out = ["# What the lookup stand-in's snapshots get wrong\n\nWritten by `scripts/studies/lookup_errors.py` "
           f"(greedy, {n} held-out single-question records of exactly K lines at L_tr = {l_tr} per row; "
           "the kinds are defined in its docstring).\n",
           "| snapshot | form | lines | n | " + " | ".join(KINDS) + " | " + " | ".join(f"echo: {e}" for e in ECHOES)
           + " |", "|---|---|---|---|" + "---|" * (len(KINDS) + len(ECHOES))]
    chance_rows: list[str] = []
    two = ["\n## Records of two lines: whose number the answer is, by the line asked\n",
           "| snapshot | form | line asked | n | first line's | second line's | neither |", "|---|---|---|---|---|---|---|"]
    generated = 0
    for snap in snapshots:
        name = f"{snap.parent.name}/{snap.name}"
        answers = Answers(snap, cache / f"{snap.parent.name}-{snap.name}.json" if cache else None, kept_only)
        for form in forms:
            for k in counts:
                prompts = [p for p, _ in records(answers.tok, k, n, l_tr, fmt, form)]
                kinds, echoes, chance, by_place = diagnose(answers, prompts, form,
                                                           with_chance=snap == snapshots[-1])
                if k == 2:
                    two += place_rows(name, form, by_place)
                cells = [f"{100 * kinds[x] / n:.0f}%" for x in KINDS] + [f"{100 * echoes[x] / n:.0f}%" for x in ECHOES]
                out.append(f"| {name} | {form} | {k} | {n} | " + " | ".join(cells) + " |")
                say(out[-1])
                if snap == snapshots[-1]:  # the same records for every snapshot: one chance row per count
                    luck = [f"{100 * chance[x] / (n * CHANCE_DRAWS):.1f}%" for x in KINDS]
                    chance_rows.append(f"| chance (random numbers) | {form} | {k} | {n * CHANCE_DRAWS} | "
                                       + " | ".join(luck) + " | | | |")
                    say(chance_rows[-1])
        generated += answers.computed
    return "\n".join(out + chance_rows + (two if 2 in counts else [])) + "\n", generated


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("snapshots", nargs="+", type=Path)
    p.add_argument("--counts", nargs="+", type=int, default=[2, 6, 12])
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--l-tr", type=int, default=256)
    p.add_argument("--format", default="short")
    p.add_argument("--forms", nargs="+", choices=FORMS, default=["benchmark"],
                   help="the record forms to diagnose (lengthx.minis.lookup_data.FORMS; the card's is benchmark)")
    p.add_argument("--out", type=Path, help="the Markdown file to write (default: the rows on stdout only)")
    p.add_argument("--cache", type=Path, help="a folder keeping each snapshot's answers (Answers; default: none kept)")
    args = p.parse_args()
    torch.set_num_threads(1)
    text, generated = report(args.snapshots, args.counts, args.n, args.l_tr, args.format, args.forms, args.cache,
                             say=lambda row: print(row, flush=True))
    print(f"{generated} answers generated")
    if args.out:  # written whole at the end, so a stopped run leaves the last table in place
        args.out.write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
