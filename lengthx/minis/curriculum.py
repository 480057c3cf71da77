"""The retrieval stand-in's lines curriculum (docs/mini-t5-lookup.md): stages of 1, 2, … lines, each passed on a
measured threshold, and, for the lookup stand-in, the forms of its records trained in turn.

A stage passes when the single-question records with exactly that many lines reach ``gate`` teacher-forced exact
match over a block of at least ``window`` of them; after the last count that fits L_tr comes the full stage (as
many lines as fit), which has no gate. With several ``forms`` (:data:`lengthx.minis.lookup_data.FORMS`), each form
runs the stages to its full stage before the next form begins again at one line; the last form's full stage is
the curriculum's end. A form may hold another count of lines at L_tr (``capacities``): a form before the last ends
at the most lines its records hold, so that its full stage is reached and the next form begins.
"""

from __future__ import annotations

from typing import Any

import torch


class Curriculum:
    """Lines stages 1, 2, …, ``capacity`` and then full, in each of ``forms`` in turn (module doc)."""

    def __init__(self, capacity: int, gate: float, window: int, device: torch.device,
                 forms: tuple[str, ...] = ("benchmark",), capacities: dict[str, int] | None = None):
        self.gate, self.window, self.forms = gate, window, tuple(forms)
        self.capacities = {form: (capacities or {}).get(form, capacity) for form in self.forms}
        self.stage = 1
        self.form_index = 0
        self.hits = torch.zeros((), device=device)  # running on the device: no synchronisation per step
        self.seen = torch.zeros((), device=device)
        self.passed: dict[int, int] = {}  # stage -> step it passed, in the current form
        self.earlier: dict[str, dict[int, int]] = {}  # a finished form -> its stages' steps

    @property
    def form(self) -> str:
        """The form of this stage's lookup records."""
        return self.forms[self.form_index]

    @property
    def capacity(self) -> int:
        """The most lines of this form's stages; past it, the full stage."""
        return self.capacities[self.form]

    @property
    def full(self) -> bool:
        return self.stage > self.capacity

    @property
    def lines_count(self) -> int:
        """Lines requested per record at this stage (the full stage asks for more than fit)."""
        return 2 * self.capacity + 2 if self.full else self.stage

    def update(self, n_lines: torch.Tensor, exact: torch.Tensor) -> None:
        """Count a batch's lines examples at the current stage."""
        at_stage = n_lines == self.stage
        self.hits += (exact & at_stage).sum()
        self.seen += at_stage.sum()

    def advance(self, step: int) -> bool:
        """Close the block once it has ``window`` examples; pass the stage (and return True) at ``gate``. Passing
        the last counted stage of a form that is not the last starts the next form at one line."""
        seen = float(self.seen)
        if self.full or seen < self.window:
            return False
        rate = float(self.hits) / seen
        self.hits.zero_()
        self.seen.zero_()
        if rate < self.gate:
            return False
        self.passed[self.stage] = step
        self.stage += 1
        if self.full and self.form_index + 1 < len(self.forms):
            self.earlier[self.form] = self.passed
            self.form_index += 1
            self.stage, self.passed = 1, {}
        return True

    def gates(self) -> dict[Any, int]:
        """Each passed stage's step: by count alone with one form, as ``"<form> <count>"`` with several."""
        if len(self.forms) == 1:
            return dict(self.passed)
        done = {**self.earlier, self.form: self.passed}
        return {f"{form} {k}": v for form, passed in done.items() for k, v in passed.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "hits": float(self.hits), "seen": float(self.seen), "passed": self.passed,
                "forms": list(self.forms), "form_index": self.form_index, "earlier": self.earlier}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore a saved curriculum (a state from before forms existed was of the benchmark form alone).

        Raises ``ValueError`` when the state was saved with other forms than this curriculum's."""
        saved = tuple(d.get("forms", ("benchmark",)))
        if saved != self.forms:
            raise ValueError(f"the saved curriculum trains the forms {','.join(saved)}, not "
                             f"{','.join(self.forms)}: resume with --lookup-forms {','.join(saved)}, or start "
                             "another run directory")
        self.stage, self.passed = d["stage"], {int(k): v for k, v in d["passed"].items()}
        self.form_index = int(d.get("form_index", 0))
        self.earlier = {f: {int(k): v for k, v in p.items()} for f, p in d.get("earlier", {}).items()}
        self.hits.fill_(d["hits"])
        self.seen.fill_(d["seen"])
