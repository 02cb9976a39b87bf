"""GSM8K scorer: verl HEAD semantics (300-char tail, strict/flexible extraction, exact string match)."""

from __future__ import annotations

import pytest

from hybridrl.rewards.gsm8k import compute_score, extract_solution


def test_strict_takes_the_last_marked_answer_without_commas():
    assert extract_solution("so #### 3 wait, no #### 1,234") == "1234"
    assert extract_solution("#### -7.5") == "-7.5"
    assert extract_solution("the answer is 72") is None
    assert extract_solution("####72") is None  # the space after #### is required


def test_only_the_last_300_characters_are_searched():
    assert extract_solution("#### 72" + "x" * 293) == "72"
    assert extract_solution("#### 72" + "x" * 294) is None
    assert extract_solution("12 " + "x" * 300, method="flexible") is None


def test_flexible_takes_the_last_number_skipping_lone_dots():
    assert extract_solution("x 12 y .", method="flexible") == "12"
    assert extract_solution("the answer is 72.", method="flexible") == "72."  # trailing dot kept, as verl
    assert extract_solution(". and .", method="flexible") == "."  # all invalid: verl leaves the first match
    assert extract_solution("no digits", method="flexible") is None


def test_compute_score_is_exact_string_equality():
    assert compute_score("... #### 72", "72") == 1.0
    assert compute_score("... #### 72.0", "72") == 0.0
    assert compute_score("... #### 71", "72", format_score=0.1) == 0.1
    assert compute_score("no answer", "72", format_score=0.1) == 0.0
    assert compute_score("... #### 72", "72", score=2.0) == 2.0
    assert compute_score("it is 72", "72", method="flexible") == 1.0


def test_unknown_method_is_an_error():
    with pytest.raises(ValueError, match="'loose'"):
        extract_solution("#### 1", method="loose")
