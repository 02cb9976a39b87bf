"""Geometry3K reward (verl geo3k): 0.9 x accuracy + 0.1 x format."""

from __future__ import annotations

import pytest

from hybridrl.rewards.geo3k import compute_score, extract_boxed_content, format_reward


def test_extract_boxed_content():
    assert extract_boxed_content("a \\boxed{x} b \\boxed{ {1}+2 }") == "{1}+2"
    assert extract_boxed_content("\\boxed{open") == "None"
    assert extract_boxed_content("nothing") == "None"


def test_format_needs_think_then_a_box():
    assert format_reward("<think>r</think> so \\boxed{3}.") == 1.0
    assert format_reward("<think>r</think>\n\nso \\boxed{3}") == 1.0
    assert format_reward("so \\boxed{3}") == 0.0
    assert format_reward("<think>r</think> no box") == 0.0


@pytest.mark.parametrize("response, truth, expected", [
    ("<think>r</think> \\boxed{30}", "30", 1.0),
    ("\\boxed{30}", "30", 0.9),
    ("<think>r</think> \\boxed{31}", "30", 0.1),
    ("no box", "30", 0.0),
    ("<think>r</think> \\boxed{30^\\circ}", "30", 1.0),
])
def test_scores(response, truth, expected):
    assert compute_score(response, truth) == pytest.approx(expected)


def test_format_score_and_unboxed_mode():
    assert compute_score("30", "30", use_boxed=False, format_score=0.5) == pytest.approx(0.5)
