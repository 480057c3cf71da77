"""The public temperature API does what it says or refuses (docs/api.md, paper A §4, §7): nested ``with
lengthx.temperature`` blocks give back the τ that was there before, as does a block after ``apply_temperature``;
a τ that is not a finite number above 0 and closed-form inputs out of their domain are a ValueError naming
them."""

from __future__ import annotations

import math

import pytest
from conftest import tiny_gpt2, tiny_t5

import lengthx


def _taus(modules) -> list[float | None]:
    return [getattr(m, "lengthx_tau", None) for m in modules]


def test_a_nested_block_gives_the_outer_tau_back():
    model = tiny_t5(attn="sdpa")
    modules = lengthx.attention_modules(model)
    with lengthx.temperature(model, 0.8):
        with lengthx.temperature(model, 0.5):
            assert _taus(modules) == [0.5, 0.5]
        assert _taus(modules) == [0.8, 0.8]
        with lengthx.temperature(model, {1: 0.6}):  # module 0 at τ = 1 inside, 0.8 again after
            assert _taus(modules) == [1.0, 0.6]
        assert _taus(modules) == [0.8, 0.8]
    assert _taus(modules) == [None, None] and model.config._attn_implementation == "sdpa"


def test_a_block_after_apply_temperature_gives_the_applied_tau_back():
    model = tiny_gpt2(attn="sdpa")
    modules = lengthx.apply_temperature(model, 0.7)
    with lengthx.temperature(model, 0.5):
        assert _taus(modules) == [0.5, 0.5]
    assert _taus(modules) == [0.7, 0.7]
    lengthx.remove_temperature(model)
    assert _taus(modules) == [None, None] and model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("tau,match", [
    (math.nan, "finite number above 0"),
    (math.inf, "finite number above 0"),
    (-0.5, "finite number above 0"),
    ("0.5", "must be a number, got tau='0.5'.*tau=0.5"),
    (True, "must be a number"),
    ([0.5, "x"], "must be a number"),
    ({0: math.nan}, "finite number above 0"),
])
def test_a_tau_that_is_not_a_positive_number_is_refused(tau, match):
    """NaN (which made every output NaN), text (which failed on its characters), a bool: a ValueError naming
    the value, the model left as it was."""
    model = tiny_t5(attn="sdpa")
    with pytest.raises(ValueError, match=match), lengthx.temperature(model, tau):
        pass
    with pytest.raises(ValueError, match=match):
        lengthx.apply_temperature(model, tau)
    assert _taus(lengthx.attention_modules(model, "all")) == [None] * 6


@pytest.mark.parametrize("call,match", [
    (lambda: lengthx.prop2_temperature(256, 1024, 1.0, -1.0), "sigma_ex=-1.0 is out of range"),
    (lambda: lengthx.prop2_temperature(256, 1024, math.nan, 1.0), "sigma_tr must be a finite number"),
    (lambda: lengthx.prop2_temperature(0, 1024, 1.0, 1.0), "l_tr=0 is out of range"),
    (lambda: lengthx.prop1_temperature(256, 1024, 1.5, 1.0, 1.0), "pmax_tr=1.5 is out of range"),
    (lambda: lengthx.prop1_temperature(256, 1024, 0.3, -2.0, 1.0), "sigma_tr=-2.0 is out of range"),
])
def test_closed_forms_refuse_inputs_out_of_their_domain(call, match):
    """A negative standard deviation gave a negative τ (−0.51); now the argument is named."""
    with pytest.raises(ValueError, match=match):
        call()


def test_closed_forms_still_compute_inside_their_domain():
    assert lengthx.prop2_temperature(256, 1024, 1.0, 1.0) == pytest.approx(1 / math.sqrt(1 + 2 * math.log(4)))
    assert 0 < lengthx.prop1_temperature(256, 1024, 0.3, 1.0, 1.2) < 1
