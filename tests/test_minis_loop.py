"""lengthx.minis.loop: the one loop of the minis' recipes: boxes, exact resume, what counts as training time."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from lengthx.errors import Terminated, raise_terminated
from lengthx.minis.loop import Box, TrainingLoop


class Toy:
    """A linear regression whose batch ``k`` comes from a generator whose state is saved (as mini-t5's)."""

    def __init__(self, seed: int = 0, stop_at: int | None = None, slow_eval: float = 0.0,
                 signals: tuple[int, list[signal.Signals]] = (0, [])):
        torch.manual_seed(seed)
        self.model = torch.nn.Linear(4, 1)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.1)
        self.gen = torch.Generator().manual_seed(seed)
        self.stop_at, self.slow_eval, self.signals = stop_at, slow_eval, signals
        self.seen: list[int] = []

    def lr(self, loop: TrainingLoop) -> float:
        return 0.1 * (1 - loop.progress)

    def loss(self, step: int) -> torch.Tensor:
        self.seen.append(step)
        x = torch.randn(8, 4, generator=self.gen)
        return ((self.model(x).squeeze(1) - x.sum(1)) ** 2).mean()

    def after_step(self, loop: TrainingLoop) -> None:
        loop.state["curve"].append({"step": loop.step})
        if self.slow_eval:
            with loop.untimed():
                time.sleep(self.slow_eval)
        if self.stop_at is not None and loop.step == self.stop_at:
            loop.state["stopped"] = "asked"
        at, signums = self.signals
        if loop.step == at:  # as ``kill`` sends them, mid-step; raised in this thread, so that no other thread of
            for signum in signums:  # the process (xdist's, torch's) takes one and delays its handler past the step
                signal.raise_signal(signum)
            loop.state["curve"][-1]["after_the_signals"] = True  # the rest of the step is done

    def state_parts(self) -> dict[str, Any]:
        return {"generator": self.gen.get_state()}

    def load_state_parts(self, saved: dict[str, Any]) -> None:
        self.gen.set_state(saved["generator"])


def _run(out: Path, box: Box, **toy: Any) -> tuple[TrainingLoop, Toy]:
    recipe = Toy(**toy)
    loop = TrainingLoop(out, recipe.model, recipe.optimizer, recipe, box, {"step": 0, "seconds": 0.0})
    loop.resume()
    loop.run()
    return loop, recipe


def _weights(loop: TrainingLoop) -> list[torch.Tensor]:
    return [p.detach().clone() for p in loop.model.parameters()]


def test_a_stopped_and_resumed_run_ends_on_the_weights_of_an_uninterrupted_one(tmp_path):
    straight, _ = _run(tmp_path / "a", Box(12))
    first, _ = _run(tmp_path / "b", Box(12, stop_step=5))  # the schedule of 12 steps, stopped after 5
    assert first.step == 5 and (tmp_path / "b" / "state.pt").is_file()
    resumed, recipe = _run(tmp_path / "b", Box(12))
    assert recipe.seen == list(range(5, 12))  # batches 5..11 only: none drawn twice
    assert all(torch.equal(a, b) for a, b in zip(_weights(straight), _weights(resumed), strict=True))
    assert [r["step"] for r in resumed.state["curve"]] == list(range(1, 13))
    other, _ = _run(tmp_path / "c", Box(12), seed=1)
    assert not all(torch.equal(a, b) for a, b in zip(_weights(straight), _weights(other), strict=True))


def test_the_recipe_stops_a_run_and_a_finished_run_takes_no_step(tmp_path):
    loop, _ = _run(tmp_path, Box(50), stop_at=3)
    assert loop.step == 3 and loop.state["stopped"] == "asked"
    again, recipe = _run(tmp_path, Box(50))
    assert again.step == 3 and recipe.seen == []


def test_time_inside_untimed_is_not_training_time(tmp_path):
    loop, _ = _run(tmp_path, Box(4), slow_eval=0.25)
    assert loop.minutes * 60 < 0.5  # four quarter-second evaluations were not counted


def test_the_minute_box_stops_a_run(tmp_path):
    loop, _ = _run(tmp_path, Box(10**6, max_minutes=1e-9))
    assert loop.step == 1 and loop.progress >= 1


def test_a_run_that_lost_its_state_resumes_from_the_portable_point_with_a_fresh_optimizer(tmp_path):
    first, _ = _run(tmp_path, Box(12, stop_step=5, portable=True))
    portable = torch.load(tmp_path / "resume.pt", weights_only=True)
    assert "opt" not in portable and all(v.dtype == torch.float16 for v in portable["model"].values())
    (tmp_path / "state.pt").unlink()  # a fresh clone: only what was committed is there
    resumed, recipe = _run(tmp_path, Box(12, portable=True))
    assert recipe.seen == list(range(5, 12))  # the data stream goes on where it stopped
    assert resumed.state["optimizer_fresh_at"] == 5 and resumed.step == 12
    assert [r["step"] for r in resumed.state["curve"]] == list(range(1, 13))
    without, _ = _run(tmp_path / "plain", Box(12, stop_step=5))
    assert not (tmp_path / "plain" / "resume.pt").exists()  # only a portable box writes it


def test_the_portable_point_saves_tied_weights_once(tmp_path):
    from transformers import T5Config, T5ForConditionalGeneration

    from lengthx.minis.loop import _atomic_save, _half

    model = T5ForConditionalGeneration(T5Config(vocab_size=4000, d_model=32, d_ff=32, num_layers=1, num_heads=2,
                                                tie_word_embeddings=True))
    _atomic_save({"model": _half(model.state_dict())}, tmp_path / "tied.pt")
    _atomic_save({"model": {k: v.half() for k, v in model.state_dict().items()}}, tmp_path / "apart.pt")
    embedding = 4000 * 32 * 2  # bytes of one fp16 copy
    assert (tmp_path / "apart.pt").stat().st_size - (tmp_path / "tied.pt").stat().st_size > 2 * embedding


@pytest.fixture
def as_the_cli():
    """SIGTERM handled as the ``lengthx`` command handles it (:func:`lengthx.errors.raise_terminated`)."""
    before = signal.signal(signal.SIGTERM, raise_terminated)
    yield
    signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("signum, raised", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_ends_the_step_under_way_saves_it_and_stops_the_run_as_it_would_have(tmp_path, as_the_cli, signum,
                                                                                       raised):
    """SIGTERM or Ctrl-C mid-step: the step ends, the state is saved there (past the periodic save at step 4), the
    signal's own handler then stops the run (``lengthx``: exit 143 or 130); the rerun ends on the uninterrupted
    run's weights."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with pytest.raises(raised) as stopped:
        _run(tmp_path / "a", Box(12, save_every_steps=4, portable=True), signals=(6, [signum]))
    assert type(stopped.value) is raised
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    for name in ("state.pt", "resume.pt"):
        assert torch.load(tmp_path / "a" / name, weights_only=True)["state"]["step"] == 6
    curve = json.loads((tmp_path / "a" / "curve.json").read_text())
    assert curve[-1] == {"step": 6, "after_the_signals": True}
    resumed, recipe = _run(tmp_path / "a", Box(12, save_every_steps=4, portable=True))
    assert recipe.seen == list(range(6, 12))
    straight, _ = _run(tmp_path / "b", Box(12, save_every_steps=4, portable=True))
    assert all(torch.equal(a, b) for a, b in zip(_weights(straight), _weights(resumed), strict=True))
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def test_a_second_signal_stops_the_run_at_once_and_leaves_the_last_save_whole(tmp_path, as_the_cli):
    with pytest.raises(KeyboardInterrupt) as stopped:  # (Terminated is one) caught: a regression fails, not aborts
        _run(tmp_path, Box(12, save_every_steps=4), signals=(6, [signal.SIGINT, signal.SIGTERM]))
    assert type(stopped.value) is Terminated  # the second signal's handler
    assert torch.load(tmp_path / "state.pt", weights_only=True)["state"]["step"] == 4  # step 6 not finished
    assert signal.getsignal(signal.SIGTERM) == raise_terminated
    assert signal.getsignal(signal.SIGINT) == signal.default_int_handler


def test_without_a_handler_a_signal_handed_over_exits_as_the_signal_would():
    """A trainer's script run by itself (SIGTERM's default action): the save done, the exit status is 143."""
    from lengthx.segmented.preemption import DeferredSignal

    deferred = DeferredSignal({signal.SIGTERM: signal.SIG_DFL})
    deferred.received = signal.SIGTERM
    with pytest.raises(SystemExit) as stopped:
        deferred.hand_over()
    assert stopped.value.code == 143
