"""What the lookup stand-in's snapshots get wrong (docs/mini-t5-study.md, "The lookup stand-in"): greedy answers on
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

    .venv/bin/python scripts/studies/lookup_errors.py results/mini-t5-lookup/snapshots/warm/step-08000 --counts 2 6 12 --out errors.md
"""

from __future__ import annotations

import argparse
import random
import re
from collections import Counter
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, T5ForConditionalGeneration

from lengthx.minis.lookup_data import FORMS, ONE_PIECE_MAX, lookup_record
from lengthx.tasks.lines import MAX_VALUE

KINDS = ("right", "other line", "near", "near other", "no line")
ECHOES = ("asked key", "other key", "no key")
CHANCE_DRAWS = 50  # random answers per record for the chance rows
_LINE = re.compile(r"line (\S+): REGISTER_CONTENT is <(\d+)>")
_ASKED = re.compile(r"in line (\S+)\? I need the number")


def near(a: str, b: str, tok: PreTrainedTokenizerFast) -> bool:
    """Whether number ``a`` looks like a garbling of ``b``: the same first or last token."""
    pa, pb = ([t for t in tok.tokenize(x) if t.strip("▁")] for x in (a, b))
    return a != b and (pa[0] == pb[0] or pa[-1] == pb[-1])


def classify(answer: str, prompt: str, tok: PreTrainedTokenizerFast) -> tuple[str, str]:
    """(kind, echo) of one answer to one single-question record (module doc)."""
    lines = dict(_LINE.findall(prompt))
    asked = _ASKED.search(prompt).group(1)
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


@torch.no_grad()
def load(snapshot: Path) -> tuple[T5ForConditionalGeneration, PreTrainedTokenizerFast]:
    """A snapshot's model (fp32, eval mode) and tokenizer, loaded once for all its rows."""
    tok = PreTrainedTokenizerFast.from_pretrained(snapshot, trust_remote_code=False)
    model = T5ForConditionalGeneration.from_pretrained(snapshot, dtype=torch.float32, trust_remote_code=False).eval()
    return model, tok


def diagnose(model: T5ForConditionalGeneration, tok: PreTrainedTokenizerFast, k: int, n: int, l_tr: int, fmt: str,
             form: str = "benchmark") -> tuple[Counter, Counter, Counter, Counter]:
    """Counts of kinds and echoes over ``n`` records of exactly ``k`` lines in ``form`` (fewer kept ones are drawn
    again), the kinds of random numbers of that form's range given to the same records (the chance row), and the
    kinds by the asked line's place in the record (``(1, "right")``: the first line asked, its number answered)."""
    prompts: list[str] = []
    i = 0
    while len(prompts) < n:
        prompt, _, kept = lookup_record(tok, l_tr, k, False, random.Random(f"diagnose:{k}:{i}"), fmt, form)
        i += 1
        if kept == k:
            prompts.append(prompt)
        if i > 20 * n:
            raise SystemExit(f"records of {k} lines rarely fit {l_tr} tokens")
    kinds: Counter = Counter()
    echoes: Counter = Counter()
    by_place: Counter = Counter()
    rng = random.Random(f"chance:{form}:{k}")
    most = MAX_VALUE if form == "benchmark" else ONE_PIECE_MAX
    chance = Counter(classify(str(rng.randint(1, most)), prompt, tok)[0] for prompt in prompts
                     for _ in range(CHANCE_DRAWS))
    for j in range(0, n, 32):
        chunk = prompts[j : j + 32]
        enc = tok(chunk, return_tensors="pt", padding=True)
        out = tok.batch_decode(model.generate(**enc, max_new_tokens=24, do_sample=False, num_beams=1),
                               skip_special_tokens=True)
        for answer, prompt in zip(out, chunk, strict=True):
            kind, echo = classify(answer, prompt, tok)
            kinds[kind] += 1
            echoes[echo] += 1
            by_place[(asked_place(prompt), kind)] += 1
    return kinds, echoes, chance, by_place


def asked_place(prompt: str) -> int:
    """The asked line's place in the record, from 1."""
    return [k for k, _ in _LINE.findall(prompt)].index(_ASKED.search(prompt).group(1)) + 1


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
    args = p.parse_args()
    torch.set_num_threads(1)
    out = ["# What the lookup stand-in's snapshots get wrong\n\nWritten by `scripts/studies/lookup_errors.py` "
           f"(greedy, {args.n} held-out single-question records of exactly K lines at L_tr = {args.l_tr} per row; "
           "the kinds are defined in its docstring).\n",
           "| snapshot | form | lines | n | " + " | ".join(KINDS) + " | " + " | ".join(f"echo: {e}" for e in ECHOES)
           + " |", "|---|---|---|---|" + "---|" * (len(KINDS) + len(ECHOES))]
    chance_rows: list[str] = []
    two = ["\n## Records of two lines: whose number the answer is, by the line asked\n",
           "| snapshot | form | line asked | n | first line's | second line's | neither |", "|---|---|---|---|---|---|---|"]
    for snap in args.snapshots:
        model, tok = load(snap)
        for form in args.forms:
            for k in args.counts:
                kinds, echoes, chance, by_place = diagnose(model, tok, k, args.n, args.l_tr, args.format, form)
                if k == 2:
                    two += place_rows(f"{snap.parent.name}/{snap.name}", form, by_place)
                n = args.n
                cells = [f"{100 * kinds[x] / n:.0f}%" for x in KINDS] + [f"{100 * echoes[x] / n:.0f}%" for x in ECHOES]
                out.append(f"| {snap.parent.name}/{snap.name} | {form} | {k} | {n} | " + " | ".join(cells) + " |")
                print(out[-1], flush=True)
                if snap == args.snapshots[-1]:  # the same records for every snapshot: one chance row per count
                    luck = [f"{100 * chance[x] / (n * CHANCE_DRAWS):.1f}%" for x in KINDS]
                    chance_rows.append(f"| chance (random numbers) | {form} | {k} | {n * CHANCE_DRAWS} | "
                                       + " | ".join(luck)
                                       + " | | | |")
                    print(chance_rows[-1], flush=True)
    out += chance_rows + (two if 2 in args.counts else [])
    if args.out:  # written whole at the end, so a stopped run leaves the last table in place
        args.out.write_text("\n".join(out) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
