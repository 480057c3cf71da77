"""Lengths checked before any work (docs/design.md §3-§4): a setting longer than a model can read at all stops
the run with one line naming the limit and the fix, and a setting far past every length the papers measure
(relative to the model's training length) is named once, in case it was meant in another unit."""

from __future__ import annotations

import logging
from typing import Any

from lengthx.errors import UsageError
from lengthx.models.limits import configured_position_limit, too_long
from lengthx.tasks.base import COUNT_KEYS

log = logging.getLogger("lengthx")

# paper A's longest setting is 15,000 tokens for L_tr = 512 (29.3x, Tables 3 and 8); paper B's is 5 L_t
FAR_RATIO = 32


def setting_tokens(runner: Any, setting: Any) -> int:
    """The tokens the model reads for ``setting``: its value in tokens, else the first example's prompt; the last
    L_tr of them for the ``truncation`` baseline."""
    if setting.unit == "tokens":
        tokens = int(setting.value)
    else:
        tokens = runner.task.examples(setting, runner.tokenizer, 1, int(runner.cfg.task.seed))[0].actual_tokens
    if runner.method.name == "truncation":
        tokens = min(tokens, int(runner.cfg.model.l_tr))
    return tokens


def far_settings(cfg: Any, settings: list[Any]) -> str | None:
    """The warning for explicit ``task.settings`` values in tokens more than :data:`FAR_RATIO` times
    ``model.l_tr`` (perhaps meant in the paper's unit), or None."""
    l_tr = int(cfg.model.l_tr)
    if cfg.task.get("settings") is None:
        return None
    far = [s for s in settings if s.unit == "tokens" and s.value > FAR_RATIO * l_tr]
    if not far:
        return None
    shown = ", ".join(f"{s.value} tokens = {s.value / l_tr:.0f}x" for s in far)
    head = f"lengthx: task.settings: {shown} model.l_tr ({l_tr} tokens); the papers reach about 29x L_tr."
    for key in COUNT_KEYS.values():  # their settings can only be tokens (lengthx.tasks.base.count_knob_problem)
        if cfg.task.get(key) is not None:
            return f"{head} With task.{key} the settings are lengths in tokens: check the values"
    return (f"{head} If you meant the paper's characters of filler (or lines, topics), add task.unit="
            f"{cfg.task.get('paper_unit') or 'chars'}")


def check_lengths(runner: Any) -> None:
    """Raise :class:`UsageError` when a setting of ``runner`` (a :class:`lengthx.core.runner.Runner`) does not fit
    the model's positions (:mod:`lengthx.models.limits`); warn once when an explicit ``task.settings`` value in
    tokens is more than :data:`FAR_RATIO` times ``model.l_tr``."""
    cfg = runner.cfg
    warning = far_settings(cfg, runner.settings())
    if warning is not None:
        log.warning("%s", warning)
    limit = configured_position_limit(cfg.model)
    if limit is None:
        return
    generated = int(runner.task.max_new_tokens or 0)
    for setting in runner.settings():
        tokens = setting_tokens(runner, setting)
        if tokens + generated > limit:
            what = (f"model={cfg.model.name} × task={cfg.task.name}: setting {setting.label} "
                    f"({tokens} prompt tokens + {generated} generated)")
            raise UsageError(too_long(limit, tokens + generated, what,
                                      f"a model with relative, rotary or ALiBi positions (a T5, pythia or bloom "
                                      f"model), or task.settings=[…] task.unit=tokens of at most "
                                      f"{max(1, limit - generated)} tokens"))
