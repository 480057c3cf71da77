"""Benchmark of training-data generation for mini-t5: prompts as text then tokenised, vs token ids directly.

Both paths produce the same examples (``tests/test_token_ids.py``): passkey and LongEval lines prompts of at
most L_tr = 256 tokens with mini-t5's tokenizer. ``text`` draws each case with the task module
(``lengthx.tasks.passkey`` / ``lines``), builds its prompt and tokenises the batch in one call of the fast
tokenizer (a lines record drawn with more lines than fit keeps the asked line and as many others as fit, found by
bisection);
``ids`` draws the batch with ``lengthx.tasks.token_ids``. Both run on the CPU, one thread, interleaved over
``--rounds`` rounds; the table gives the median examples/s and the ratio ids / text.

    python scripts/bench/bench_token_ids.py      # -> results/bench/token_ids.md
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from transformers import AutoTokenizer  # noqa: E402

from lengthx.data.fitting import bisect_largest  # noqa: E402
from lengthx.tasks import lines, passkey  # noqa: E402
from lengthx.tasks.token_ids import LinesIds, PasskeyIds  # noqa: E402


def text_passkey(tok, gen: PasskeyIds, batch: int, rng: random.Random) -> list[list[int]]:
    prompts = []
    for _ in range(batch):
        g = rng.randint(0, gen.max_garbage)
        prompts.append(passkey.passkey_prompt(rng.randint(1, passkey.MAX_KEY), g, rng.randint(0, g)))
    return tok(prompts)["input_ids"]


def text_lines(tok, l_max: int, batch: int, rng: random.Random, n_lines: int) -> list[list[int]]:
    """Each record keeps the asked line and, found by bisection, as many of the first other lines as fit."""
    out = []
    for case in [lines.lines_case(n_lines, rng) for _ in range(batch)]:
        asked = case.pairs[case.query]
        others = [p for p in case.pairs if p != asked]

        def ids(k: int, others: list = others, asked: tuple = asked, at: int = case.query) -> list[int]:
            pairs = others[:k]
            pairs.insert(min(at, k), asked)
            return tok(lines.lines_prompt(pairs, asked[0]))["input_ids"]

        if len(ids(len(others))) <= l_max:
            out.append(ids(len(others)))
        else:
            out.append(ids(bisect_largest(lambda k: len(ids(k)) <= l_max, 0, len(others))))
    return out


def rate(fn: Callable[[], object], batch: int, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return batch * repeats / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "token_ids.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(str(ROOT / "lengthx" / "checkpoints" / "mini-t5"), trust_remote_code=False)
    l_max = 256
    pk, ln = PasskeyIds(tok, l_max), LinesIds(tok, l_max)
    gen, rng = torch.Generator().manual_seed(0), random.Random(0)
    full = 2 * ln.capacity()
    cases = {
        "passkey": (lambda: text_passkey(tok, pk, args.batch, rng), lambda: pk.sample(args.batch, 1.0, gen)),
        "lines, 2 per record": (lambda: text_lines(tok, l_max, args.batch, rng, 2),
                                lambda: ln.sample(args.batch, 2, gen)),
        "lines, as many as fit": (lambda: text_lines(tok, l_max, args.batch, rng, full),
                                  lambda: ln.sample(args.batch, full, gen)),
    }
    rows = []
    for name, (text, ids) in cases.items():
        t_rates, i_rates = [], []
        for _ in range(args.rounds):
            t_rates.append(rate(text, args.batch, 2))
            i_rates.append(rate(ids, args.batch, 20))
        t, i = statistics.median(t_rates), statistics.median(i_rates)
        rows.append(f"| {name} | {t:,.0f} | {i:,.0f} | {i / t:.0f}x |")
        print(rows[-1], flush=True)
    table = "\n".join(["| examples | text + tokenizer (ex/s) | token ids (ex/s) | ids / text |", "|---|---|---|---|", *rows])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"# Training-data generation for mini-t5 (CPU, one thread, batch {args.batch}, L_tr {l_max})\n\n"
                        f"Median of {args.rounds} interleaved rounds; `python scripts/bench/bench_token_ids.py`.\n\n"
                        f"{table}\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
