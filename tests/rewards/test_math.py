"""MATH scorer (verl math_reward): boxed extraction and Hendrycks normalization by hand; math-verify on request."""

from __future__ import annotations

import importlib.util

import pytest

from hybridrl.rewards.math import compute_score, extract_boxed_answer, is_equiv, last_boxed_only_string, strip_string

HAS_MATH_VERIFY = importlib.util.find_spec("math_verify") is not None


@pytest.mark.parametrize("text, boxed", [
    ("a \\boxed{\\frac{1}{2}} b \\boxed{x^{2}} c", "\\boxed{x^{2}}"),
    ("so $\\boxed 5$ done", "\\boxed 5"),
    ("first \\boxed 5$ then \\boxed{6}", "\\boxed 5"),  # verl: a `\\boxed ` anywhere wins
    ("\\fbox{3} end", "\\fbox{3}"),
    ("\\boxed{\\{1,2\\}}", "\\boxed{\\{1,2\\}}"),
    ("\\boxed{3", None),
    ("no answer here", None),
])
def test_last_boxed_only_string(text, boxed):
    assert last_boxed_only_string(text) == boxed


def test_extract_boxed_answer_strips_the_box():
    assert extract_boxed_answer("x \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}"
    assert extract_boxed_answer("$\\boxed 5$") == "5"
    assert extract_boxed_answer("\\fbox{B}") == "B"  # for reading reference solutions; scoring refuses it
    assert extract_boxed_answer("none") is None


def test_verl_quirks_that_change_scores():
    assert compute_score("\\fbox{7}", "7") == 0.0
    assert compute_score("so \\boxed 5$ and later \\boxed{6}", "6") == 0.0
    assert compute_score("so \\boxed 5$ and later \\boxed{6}", "5") == 1.0
    # normalization fails on two unit markers or a dangling \sqrt: the raw strings are compared
    assert compute_score("\\boxed{1\\text{ m}\\text{ s}}", "1\\text{ m}\\text{ s}") == 1.0
    assert compute_score("\\boxed{1\\text{ m}\\text{ s}}", "1") == 0.0
    assert compute_score("\\boxed{2\\sqrt}", "2\\sqrt") == 1.0
    assert compute_score("\\boxed{5}", 5) == 0.0  # a non-string ground truth never equals the answer text


@pytest.mark.parametrize("left, right", [
    ("\\left( 1, 2 \\right)", "(1,2)"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90"),
    ("\\$5", "5"),
    ("10\\text{ inches}", "10"),
    ("\\frac12", "\\frac{1}{2}"),
    ("\\frac1{72}", "\\frac{1}{72}"),
    ("0.5", "\\frac{1}{2}"),
    (".5", "0.5"),
    ("\\dfrac{3}{4}", "\\tfrac{3}{4}"),
    ("3/4", "\\frac{3}{4}"),
    ("x = 5", "5"),
    ("\\sqrt3", "\\sqrt{3}"),
    ("50\\%", "50"),
    ("1\\!000", "1000"),
])
def test_equivalent_after_normalization(left, right):
    assert is_equiv(left, right), (strip_string(left), strip_string(right))


@pytest.mark.parametrize("left, right", [("2", "3"), ("\\frac{1}{3}", "0.33"), ("x+1", "1+x"), ("(1,2)", "[1,2]")])
def test_different_answers_stay_different(left, right):
    assert not is_equiv(left, right)


def test_compute_score_uses_the_last_boxed_answer():
    assert compute_score("maybe \\boxed{3} but really \\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}") == 1.0
    assert compute_score("\\boxed{3} then \\boxed{4}", "3") == 0.0
    assert compute_score("the answer is 3", "3") == 0.0
    assert compute_score("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}") == 0.0  # verl: no symbolic equivalence


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed (pip install 'hybridrl[math]')")
def test_math_verify_catches_what_normalization_misses():
    assert compute_score("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", use_math_verify=False) == 0.0
    assert compute_score("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", use_math_verify=True) == 1.0
    assert compute_score("\\boxed{\\frac{2}{4}}", "\\frac{1}{3}", use_math_verify=True) == 0.0


@pytest.mark.skipif(HAS_MATH_VERIFY, reason="checks the install hint when math-verify is missing")
def test_requiring_math_verify_without_it_gives_the_install_hint():
    assert compute_score("\\boxed{2}", "2", use_math_verify=True) == 1.0  # normalization already agrees
    with pytest.raises(ImportError, match=r"math_verify.*pip install 'hybridrl\[math\]'"):
        compute_score("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", use_math_verify=True)
