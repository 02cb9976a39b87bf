"""Hendrycks MATH normalization: each rule by hand, and the malformed inputs that raise (as in verl)."""

from __future__ import annotations

import pytest

from hybridrl.rewards.hendrycks import fix_a_slash_b, fix_fracs, fix_sqrt, remove_right_units, strip_string


def test_rules():
    assert fix_fracs("\\frac12+\\frac{3}{4}+\\frac1{72}") == "\\frac{1}{2}+\\frac{3}{4}+\\frac{1}{72}"
    assert fix_fracs("\\frac1") == "\\frac1"  # a one-character tail is left alone
    assert fix_a_slash_b("3/4") == "\\frac{3}{4}" and fix_a_slash_b("x/4") == "x/4" and fix_a_slash_b("03/4") == "03/4"
    assert fix_sqrt("\\sqrt2\\sqrt{3}") == "\\sqrt{2}\\sqrt{3}"
    assert remove_right_units("10\\text{ cm}") == "10"
    assert strip_string("k = .5") == "\\frac{1}{2}" and strip_string("50%") == "50%"
    assert strip_string("50%", drop_bare_percent=True) == "50"


@pytest.mark.parametrize("text", ["\\frac", "2\\sqrt", "1\\text{ m}\\text{ s}"])
def test_malformed_input_raises(text):
    with pytest.raises((IndexError, ValueError)):
        strip_string(text)
