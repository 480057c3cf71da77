"""lengthx: length extrapolation of transformers, as a library and a command (``lengthx``).

Paper A (attention alignment): softmax temperature τ on T5 encoders and decoders, chosen by Algorithm 1 from
dispersal statistics, log scaling or Propositions 1-2. Paper B (segmented training): chunk-α / prefix-α
sequences at their original positions and APE interpolation. Every public name takes a plain transformers
model and tokenizer; docs/api.md lists them with the paper section each implements::

    import lengthx
    result = lengthx.calibrate(model, tokenizer, short_texts, long_texts, mode="pmax")
    with lengthx.temperature(model, result.tau):
        model.generate(...)

The names are imported on first use (PEP 562), so ``import lengthx`` — and the ``lengthx`` command's
``--help`` — load neither torch nor transformers.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# public name → the module of lengthx.api that defines it (these names stay: tests/test_api.py)
_PUBLIC = {
    # paper A: temperature on a model (§4)
    "temperature": "attention", "apply_temperature": "attention", "remove_temperature": "attention",
    "attention_modules": "attention", "model_family": "attention",
    # paper A: dispersal (§3.3), Algorithm 1 (§4), log τ (§5), Propositions 1-2 (§7)
    "Dispersal": "alignment", "dispersal": "alignment", "Alignment": "alignment", "calibrate": "alignment",
    "calibrate_per_layer": "alignment", "TEMPERATURE_GRID": "alignment", "log_temperature": "alignment",
    "prop1_temperature": "alignment", "prop2_temperature": "alignment", "ClosedForm": "alignment",
    "proposition_temperature": "alignment",
    # paper B: segmented sequences (§3.1), APE interpolation (§3.2)
    "chunk_sample": "segmented", "prefix_sample": "segmented", "collate_segmented": "segmented",
    "SegmentedCollator": "segmented", "interpolate_ape": "segmented",
    # shipped minis, task examples, results and training curves
    "mini_path": "data", "task_examples": "data", "read_results": "data", "read_training_metrics": "data",
}

__all__ = [
    "TEMPERATURE_GRID", "Alignment", "ClosedForm", "Dispersal", "SegmentedCollator", "apply_temperature",
    "attention_modules", "calibrate", "calibrate_per_layer", "chunk_sample", "collate_segmented", "dispersal",
    "interpolate_ape", "log_temperature", "mini_path", "model_family", "prefix_sample", "prop1_temperature",
    "prop2_temperature", "proposition_temperature", "read_results", "read_training_metrics", "remove_temperature",
    "task_examples", "temperature",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(import_module(f"lengthx.api.{_PUBLIC[name]}"), name)
        globals()[name] = value  # later look-ups are plain attributes
        return value
    raise AttributeError(f"module 'lengthx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
