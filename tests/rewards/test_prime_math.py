"""PRIME math reward (verl prime_math): answer extraction, ToRA's math_equal, and the final 1/0 score."""

from __future__ import annotations

import math

import pytest

from hybridrl.rewards.prime_math import compute_score, format_intervals, match_answer, math_equal, normalize, score


@pytest.mark.parametrize("response, matched, answer", [
    ("so the answer is 42.", True, "42."),
    ("The answer is \\boxed{\\frac{1}{2}}. Done", True, "\\frac{1}{2}"),
    ("Answer: x = 7", True, "7"),
    ("we get 3. Then we get 5", True, "3"),           # cut at the last ". ", then after the last "get "
    ("12 is the answer", True, "12"),
    ("no digits here, answer: maybe", False, "maybe"),
    ("plain 7", False, "plain 7"),                     # no marker at all
])
def test_match_answer(response, matched, answer):
    assert match_answer(response) == (matched, answer)


def test_normalize_handles_dollars_percent_bases_and_pi():
    assert normalize("$12", math.pi) == "12"
    assert normalize("25%", math.pi) == "25" and normalize("25\\%", math.pi) == "25"
    assert normalize("101_2", math.pi) == 101  # the base subscript is dropped (verl)
    assert normalize("2\\pi", 3.14) == pytest.approx(6.28)
    assert normalize("\\pi/2", 3.14) == pytest.approx(1.57)
    assert normalize("x\\pi", 3.14) == "x1*3.14"  # not arithmetic: left as text, never evaluated as code
    with pytest.raises(ValueError):
        normalize("x_1", math.pi)


@pytest.mark.parametrize("prediction, reference", [
    ("0.5", "50"),            # percentage variants: 50 / 100
    ("1,000", "1000"),
    ("2.00001", "2"),          # relative tolerance 1e-4
    ("(1, 2)", "(1,2)"),
    ("Interval(0, 1)", "[0, 1]"),
    ("Point(1 2)", "(1 2)"),
    ("ABC", "abc"),
])
def test_math_equal(prediction, reference):
    assert math_equal(prediction, reference)


@pytest.mark.parametrize("prediction, reference", [
    ("2.01", "2"), ("(1,2)", "(2,1)"), ("", "1"),
    ("x+1", "1+x"),                 # verl's symbolic step never runs
    ("Point(1, 2)", "(1, 2)"),      # the comma rule compares "Point(1" with "(1" first
    ("[1, 2]", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),  # LaTeX's row break splits into 3 rows
])
def test_math_not_equal(prediction, reference):
    assert not math_equal(prediction, reference)


def test_format_intervals():
    assert format_intervals("Interval.Ropen(1, 2)") == "[1, 2)"
    assert format_intervals("Interval.open(1, 2)") == "(1, 2)"
    assert format_intervals("(1, 2)") == "(1, 2)"


def test_scores():
    assert compute_score("Step 2: the answer is \\boxed{6}", "6") == (True, True, "6")
    assert compute_score("the answer is 6", "6") == (True, True, "6")  # graded equal: format reported True too
    assert compute_score("the answer is 6.28", "2\\pi") == (True, False, "6.28")  # via math_equal with pi
    assert compute_score("the answer is 7", "6") == (False, False, "7")
    assert score("the answer is \\boxed{\\dfrac{1}{2}}", "0.5") == 1.0
    assert score("the answer is x_1", "1") == 0.0  # math_equal raises on x_1: scored 0, as in verl
    assert score("", "1") == 0.0
