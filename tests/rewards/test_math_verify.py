"""verl's math_verify scorer (needs the optional math-verify package)."""

from __future__ import annotations

import importlib.util

import pytest

from hybridrl.rewards import math_verify

pytestmark = pytest.mark.skipif(importlib.util.find_spec("math_verify") is None,
                                reason="math-verify not installed (pip install 'hybridrl[math]')")


def test_equivalent_answers_and_wrong_ones():
    assert math_verify.compute_score("so \\boxed{0.5}", "\\frac{1}{2}") == 1.0
    assert math_verify.compute_score("the result is $\\frac{2}{4}$", "\\frac{1}{2}") == 1.0
    assert math_verify.compute_score("\\boxed{3}", "\\frac{1}{2}") == 0.0
    assert math_verify.compute_score("no answer at all", "2") == 0.0


def test_custom_function_signature():
    assert math_verify.compute_score_fn("any", "\\boxed{2}", "2", extra_info={}) == 1.0
