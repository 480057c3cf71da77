"""A table cell from its number to its text (docs/results.md, "Reading a mini table"): render builds each cell as an
:class:`Entry`, the table's rules annotate it (the published value beside it, a τ at Algorithm 1's grid end, a stale
cell, its interval, another example count, the best of its group), and only the emitters write it, Markdown or
LaTeX, each escaping what its format needs. No emitter reads another's text back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lengthx.core.store import UNALIGNED_MARK

STALE_MARK = "‡"  # a cell computed for a checkpoint, prompt or config that has changed (lengthx.core.currency)


@dataclass(slots=True)
class Entry:
    """One cell: ``text`` its number as the table prints it ("" when missing), then what the table says of it."""

    text: str = ""
    published: str | None = None  # --compare-paper: the published value beside ours
    grid_end: bool = False  # τ is Algorithm 1's grid end, short of its target (UNALIGNED_MARK)
    stale: bool = False  # STALE_MARK
    interval: tuple[str, str] | None = None  # the 95% interval's ends, as the value is printed
    count: int | None = None  # the cell's number of examples, where it differs from the table's usual one
    bold: bool = False  # the best of its column within its model's group

    @property
    def shown(self) -> bool:
        """Whether the cell prints anything (our value, or the published one beside a missing value)."""
        return bool(self.text or self.published)

    def markdown(self) -> str:
        """The cell in Markdown (and on the terminal)."""
        if not (self.published or self.grid_end or self.stale or self.bold or self.interval or self.count is not None):
            return self.text  # its number alone: most cells of a lab's table
        return self._emit(lambda t: t, "**{}**", STALE_MARK)

    def latex(self) -> str:
        """The cell in LaTeX: ``>`` in math, the stale mark as ``\\ddag``, bold as ``\\textbf``."""
        if not (self.published or self.grid_end or self.stale or self.bold or self.interval or self.count is not None):
            return self.text.replace(">", "$>$")
        return self._emit(lambda t: t.replace(">", "$>$"), "\\textbf{{{}}}", "\\ddag{}")

    def _emit(self, escape: Callable[[str], str], bold: str, stale: str) -> str:
        value = escape(self.text)
        text = f"{value or '–'} ({escape(self.published)})" if self.published else value
        if not text:
            return ""
        text += (UNALIGNED_MARK if self.grid_end else "") + (stale if self.stale else "")
        if self.interval is not None:
            text += f" [{self.interval[0]}, {self.interval[1]}]"
        if self.count is not None:
            text += f" (n={self.count})"
        return bold.format(text) if self.bold else text


def latex_text(text: str) -> str:
    """Prose for a LaTeX caption: ``%`` and ``&`` escaped (``accuracy (%)`` would comment out the rest of the line),
    the stale mark as ``\\ddag``; math (``$…$``) and escapes already in it are kept."""
    return text.replace("%", r"\%").replace("&", r"\&").replace(STALE_MARK, r"\ddag{}")


def plain(texts: list[str]) -> list[Entry]:
    """Entries of text that carries no annotation (paired differences, a model's empty group row)."""
    return [Entry(t) for t in texts]
