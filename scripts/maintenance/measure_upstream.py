"""Measure what still separates lengthx from the benchmarks' own code, on their released files and the committed
results, into ``results/fidelity/upstream.md`` (docs/protocol.md includes it).

Needs a LongChat checkout (``--longchat``: its ``longeval/evaluation/`` test cases and LongChat-13B-16K's
released predictions) and, for the C# parser quirk of LongCoder's ``run.py``, ``tree-sitter-c-sharp`` (optional).
Reads ``--results`` (the committed mini results: their code-completion records) and writes one Markdown table::

    python scripts/maintenance/measure_upstream.py --longchat ../LongChat --results results/mini --out results/fidelity/upstream.md

The upstream rules it measures against are written here from their code's behaviour (LongEval ``eval.py`` and
``utils.py``, LongCoder ``run.py`` and ``parser/utils.py``, fuzzywuzzy's ``fuzz.ratio``), never imported.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from lengthx.data.corpora import stdlib_split
from lengthx.tasks.lines import HEADER, LINE_TEMPLATE, QUESTION_TEMPLATE
from lengthx.tasks.metrics import code_tokens, first_line, fuzz_ratio, lcc_code, lines_correct, topic_correct

TOPICS = (5, 10, 15, 20, 25)
LINES = (200, 300, 400, 500, 600, 680)


def _predictions(path: Path) -> list[tuple[str, str]]:
    """(label, prediction) per line of a LongEval ``*_response.txt`` ("Label: …, Predict: …, prompt length: …")."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"Label: (.*?), Predict: (.*), (?:Parsed: .*?, )?prompt length: \d+$", line)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def _published_longchat() -> list[str]:
    """Paper A Table 4's LongChat row (topics 5-25, lines 200-680), from the package's published tables."""
    path = Path(__file__).resolve().parents[2] / "lengthx" / "published" / "attention-alignment-tables" / "table4.csv"
    row = next(r for r in path.read_text().splitlines() if r.startswith("LongChat,"))
    return row.split(",")[1:12]


def topics_judge(longeval: Path) -> str:
    """Containment on LongChat-13B-16K's released topic outputs, against paper A's LongChat row (a GPT judge's)."""
    ours = []
    for n in TOPICS:
        preds = _predictions(longeval / "topics" / "predictions" / "longchat-13b-16k" / f"{n}_response.txt")
        right = sum(topic_correct(" ".join(ast.literal_eval(p)) if p.startswith("[") else p, label)
                    for label, p in preds)
        ours.append(f"{100 * right / len(preds):.0f}")
    return (f"containment {', '.join(ours)} vs published {', '.join(_published_longchat()[:5])} "
            f"(LongChat-13B-16K's released outputs, 5-25 topics)")


def lines_rule(longeval: Path) -> str:
    """lengthx's last-integer rule on LongChat-13B-16K's released line outputs vs the accuracy eval.py wrote."""
    ours, theirs = [], []
    for n in LINES:
        path = longeval / "lines" / "predictions" / "longchat-13b-16k" / f"{n}_response.txt"
        preds = _predictions(path)
        ours.append(f"{100 * sum(lines_correct(p, int(label)) for label, p in preds) / len(preds):.0f}")
        acc = re.search(r"Accuracy: ([\d.]+)", path.read_text())
        theirs.append(f"{100 * float(acc.group(1)):.0f}" if acc else "–")
    return (f"lengthx {', '.join(ours)} = eval.py {', '.join(theirs)} (200-680 lines); paper A's LongChat row "
            f"prints {', '.join(_published_longchat()[5:])}")


def released_lines(longeval: Path) -> str:
    """How the released lines prompts differ from the generator's prompt of the same lines."""
    same, total = 0, 0
    for n in LINES:
        for line in (longeval / "lines" / "testcases" / f"{n}_lines.jsonl").read_text().splitlines():
            case = json.loads(line)
            pairs = re.findall(r"line (.+?): REGISTER_CONTENT is <(\d+)>\n", case["prompt"])
            ours = HEADER + "".join(LINE_TEMPLATE.format(idx=i, n=v) for i, v in pairs) \
                + QUESTION_TEMPLATE.format(idx=case["random_idx"][0])
            total += 1
            same += case["prompt"] == ours + " "
    return f"{same} of {total} released prompts are the generator's prompt of the same lines plus one trailing space"


def released_topics(longeval: Path) -> str:
    """How the released topics prompts are worded."""
    counts: dict[str, int] = defaultdict(int)
    total = 0
    for n in TOPICS:
        for line in (longeval / "topics" / "testcases" / f"{n}_topics.jsonl").read_text().splitlines():
            prompt = json.loads(line)["prompt"]
            total += 1
            counts["first topic we"] += "What is the first topic we discussed?" in prompt
            counts["topic name."] += "retrieve the first topic name." in prompt
    return (f"of {total} released prompts: {counts['first topic we']} ask "
            f"\"What is the first topic we discussed?\", {counts['topic name.']} say \"retrieve the first topic name.\"")


def _records(results: Path) -> dict[str, list[dict]]:
    """Code-completion records per cell, under each cell's newest hash."""
    out = {}
    for path in sorted((results / "records").glob("*_code_completion_*.jsonl")):
        recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        newest = recs[-1].get("config_hash")
        out[path.stem] = [r for r in recs if r.get("config_hash") == newest]
    return out


def _difflib_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's ``fuzz.ratio`` without python-Levenshtein: difflib's SequenceMatcher, rounded."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))


@lru_cache(maxsize=1)
def _csharp_parser() -> Any:
    try:
        import tree_sitter_c_sharp
        from tree_sitter import Language, Parser
    except ImportError:
        return None
    return Parser(Language(tree_sitter_c_sharp.language()))


def _csharp_code(line: str) -> str | None:
    """``tokenize_code`` with the C# grammar, as LongCoder's ``evaluate`` calls it (its module-global parser);
    ``None`` without tree-sitter-c-sharp."""
    parser = _csharp_parser()
    return None if parser is None else " ".join(code_tokens(line, parser))


def code_quirks(results: Path) -> dict[str, str]:
    """Per committed code-completion cell, the mean ES (and EM) under upstream's own quirks minus lengthx's."""
    es_difflib, es_csharp, em_csharp, non_ascii, pairs = [], [], [], 0, 0
    for recs in _records(results).values():
        if not recs:
            continue
        d1, d2, d3 = [], [], []
        for r in recs:
            pred, gt = first_line(r["output"]), str(r["target"])
            pairs += 1
            non_ascii += any(ord(c) > 127 for c in pred + gt)
            ours = fuzz_ratio(lcc_code(pred), lcc_code(gt))
            d1.append(_difflib_ratio(lcc_code(pred), lcc_code(gt)) - ours)
            cs_pred, cs_gt = _csharp_code(pred), _csharp_code(gt)
            if cs_pred is not None:
                d2.append(fuzz_ratio(cs_pred, cs_gt) - ours)
                d3.append(100 * (cs_pred.split() == cs_gt.split()) - 100 * (lcc_code(pred).split() == lcc_code(gt).split()))
        es_difflib.append(sum(d1) / len(d1))
        if d2:
            es_csharp.append(sum(d2) / len(d2))
            em_csharp.append(sum(d3) / len(d3))
    cells = len(es_difflib)

    def span(xs: list[float]) -> str:
        return f"{min(xs):+.2f} to {max(xs):+.2f}"

    out = {"difflib": f"mean ES per cell {span(es_difflib)} points ({cells} committed cells, {pairs} pairs)",
           "non_ascii": f"{non_ascii} of {pairs} committed (output, reference) pairs hold a non-ASCII character"}
    if es_csharp:
        out["csharp"] = f"mean ES per cell {span(es_csharp)}, EM {span(em_csharp)} points ({cells} committed cells)"
    return out


def stdlib_blank_lines() -> str:
    """How many held-out standard-library files hold a whitespace-only line (kept by LCC's rule, dropped here)."""
    files = stdlib_split("test")
    hit = sum(any(line.strip() == "" and line != "" for line in text.split("\n")) for _, text in files)
    return f"{hit} of {len(files)} held-out standard-library files hold a whitespace-only line"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--longchat", type=Path, required=True, help="a LongChat checkout (holding longeval/)")
    p.add_argument("--results", type=Path, default=Path("results/mini"))
    p.add_argument("--out", type=Path, default=Path("results/fidelity/upstream.md"))
    args = p.parse_args(argv)
    longeval = args.longchat / "longeval" / "evaluation"
    code = code_quirks(args.results)
    rows = [
        ("topics scoring", "a GPT judge (auto_topic_eval.py) on eval.py's outputs",
         "normalised containment of the first topic", topics_judge(longeval)),
        ("lines scoring", "eval.py: last integer of the output", "the same rule", lines_rule(longeval)),
        ("lines prompts", "released test cases (task.testcases_dir)", "generated when no test cases are given",
         released_lines(longeval)),
        ("topics prompts", "released test cases (task.testcases_dir)", "generated when no test cases are given",
         released_topics(longeval)),
        ("ES ratio", "LongCoder's README installs fuzzywuzzy without python-Levenshtein: difflib's ratio",
         "fuzz.ratio with python-Levenshtein (Indel distance)", code["difflib"]),
        ("code tokens", "run.py's evaluate parses Python with its module-global C# parser",
         "tree-sitter's Python grammar", code.get("csharp", "tree-sitter-c-sharp not installed: not measured")),
        ("token spans", "parser/utils.py slices str lines by tree-sitter's byte columns", "byte spans decoded",
         code["non_ascii"]),
        ("stand-in contexts", "LCC rows: re.sub('\\n+', '\\n') keeps whitespace-only lines",
         "LCC rows the same; the standard-library stand-in drops them", stdlib_blank_lines()),
    ]
    lines = ["**Remaining differences from the benchmarks' own code, measured** (`scripts/maintenance/measure_upstream.py`)", "",
             "| what | upstream | lengthx | measured |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
