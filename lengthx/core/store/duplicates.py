"""Records that contradict each other (docs/results.md, "A bad records line costs one example"): two records of
one example under one cell configuration cannot both be right, and neither can be chosen, so both are named,
set aside, and the example is computed again. Records of one example under different configurations are
not a conflict: a recomputed example's newer record follows its older one, and the newer is read."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def conflicting_lines(parsed: list[tuple[int, dict[str, Any]]]) -> dict[int, str]:
    """Line number → why, for every records line whose example ``id`` has another line under the same
    ``config_hash`` (``parsed``: (line number, record) of the lines that are records)."""
    lines: dict[tuple[str, Any], list[int]] = defaultdict(list)
    for number, rec in parsed:
        lines[(rec["id"], rec.get("config_hash"))].append(number)
    out = {}
    for (example, _), numbers in lines.items():
        if len(numbers) > 1:
            where = ", ".join(str(n) for n in numbers)
            for number in numbers:
                out[number] = (f"repeats example id {example!r} (lines {where}, one configuration): which record "
                               "is right cannot be told")
    return out
