"""DAPO math reward (verl math_dapo): Minerva `Answer:` extraction, normalization, boxed fallback, +-1 scores."""

from __future__ import annotations

import pytest

from hybridrl.rewards.math_dapo import compute_score, last_boxed_only_string, normalize_final_answer


@pytest.mark.parametrize("raw, normalized", [
    ("x = 12", "12"),                       # the right-hand side of the last "="
    ("1,000", "1000"),                      # thousands commas in a plain integer
    ("1,2", "12"),                          # ... any digits-and-commas string
    ("\\text{(B)}", "(B)"),
    ("\\frac12", "\\frac{1}{2}"),
    ("\\sqrt3", "\\sqrt{3}"),
    ("5 inches", "5"),
    ("90^\\circ", "90"),
    ("\\$4.50", "4.50"),
    ("$\\boxed{7}$", "7"),
    ("an apple", "apple"),                  # substitutions are plain replaces, as in Minerva
    ("a cat sat", "catsat"),
])
def test_normalize_final_answer(raw, normalized):
    assert normalize_final_answer(raw) == normalized


def test_answer_line_right_and_wrong():
    assert compute_score("work...\nAnswer: 1,000", "1000") == {"score": 1.0, "acc": True, "pred": "1000"}
    assert compute_score("Answer: 12\nmore text", "13") == {"score": -1.0, "acc": False, "pred": "12"}
    assert compute_score("answer : x=5", "5")["acc"]  # case-insensitive, spaces around the colon


def test_only_the_last_300_characters_count():
    assert compute_score("Answer: 5" + " " * 300, "5")["pred"] == "[INVALID]"
    assert compute_score("Answer: 4\n" + "x" * 280 + "\nAnswer: 5", "5")["acc"]


def test_boxed_fallback_when_there_is_no_answer_line():
    assert compute_score("so \\boxed{42}", "42") == {"score": 1.0, "acc": True, "pred": "42"}
    assert compute_score("so \\boxed{42} " + "." * 120, "42")["pred"] == "[INVALID]"  # box outside the last 100
    assert compute_score("\\boxed{ 42}", "42")["acc"] is False  # the box is compared verbatim
    assert compute_score("nothing", "42") == {"score": -1.0, "acc": False, "pred": "[INVALID]"}


def test_strict_box_mode_ignores_answer_lines():
    assert compute_score("Answer: 3 \\boxed{4}", "4", strict_box_verify=True)["acc"]
    assert compute_score("Answer: 3", "3", strict_box_verify=True) == {"score": -1.0, "acc": False, "pred": None}
    with pytest.raises(ValueError, match="4 positions"):
        compute_score("x", "1", strict_box_verify=True, pause_tokens_index=[1, 2])


def test_last_boxed_only_string_needs_balanced_braces():
    assert last_boxed_only_string("\\boxed{a{b}} \\boxed{c}") == "\\boxed{c}"
    assert last_boxed_only_string("\\boxed{a{b}") is None
    assert last_boxed_only_string("\\boxed 5") is None
