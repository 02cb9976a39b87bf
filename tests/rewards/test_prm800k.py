"""The PRM800K grader behind prime_math ("prime") and geometry3k ("mathruler"), on hand-picked answers."""

from __future__ import annotations

import importlib.util

import pytest

from hybridrl.rewards.prm800k import grade_answer, normalize_answer, sympy_difference_is_zero

HAS_PYLATEXENC = importlib.util.find_spec("pylatexenc") is not None


@pytest.mark.parametrize("given, truth", [
    ("5", "5.0"), ("1,000", "1000"), ("\\text{(B)}", "(B)"), ("10 cm", "10"), ("1.5", "3/2"),
    ("(1, 2)", "(1,2)"), ("x^2+1", "1+x^2"), ("7 3/4", "31/4"), ("50\\%", "50"), ("\\$5", "5"),
])
def test_equal_answers(given, truth):
    assert grade_answer(given, truth)


@pytest.mark.parametrize("given, truth", [
    ("2/4", "1/2"),            # unreduced fractions are wrong (no sympy for a/b vs c/d)
    ("3 million", "3000000"),  # 3*10^6 is not an integer string, and an integer truth needs an exact match
    ("(1,2)", "[1,2]"),        # brackets of tuples must agree
    ("(1,2)", "(1,2,3)"),
    ("2", "2.5"),
    ("abc", "abd"),            # more than two distinct letters: never handed to sympy
    ("", "1"),
    (None, "1"),
])
def test_different_answers(given, truth):
    assert not grade_answer(given, truth)


@pytest.mark.skipif(not HAS_PYLATEXENC, reason="pylatexenc not installed (pip install 'hybridrl[math]')")
def test_latex_goes_through_pylatexenc_then_sympy():
    assert grade_answer("\\frac{\\sqrt{8}}{2}", "\\sqrt{2}")
    assert not grade_answer("\\frac{\\sqrt{8}}{3}", "\\sqrt{2}")


def test_flavors_differ_where_mathruler_differs():
    assert normalize_answer("50%", "prime") == "50%" and normalize_answer("50%", "mathruler") == "50"
    assert grade_answer("3 liters", "3", flavor="prime") and not grade_answer("3 liters", "3", flavor="mathruler")
    with pytest.raises(ValueError, match="flavor 'other' is unknown"):
        grade_answer("1", "1", flavor="other")


def test_sympy_difference_in_process():
    assert sympy_difference_is_zero("2*x+2", "2*(x+1)")
    assert not sympy_difference_is_zero("x", "x+1")
    assert not sympy_difference_is_zero("2^{10}", "1024")  # `^{` may hang sympy: refused
    assert not sympy_difference_is_zero("((", "1")  # unparsable
