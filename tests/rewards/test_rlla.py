"""RLLA tool-use reward (verl rlla.py, GDPO): format in {0, 1} plus tool-call correctness in [-3, 3]."""

from __future__ import annotations

import pytest

from hybridrl.rewards.rlla import compute_score, match_score, tool_call_reward

QWEN = {"experiment_name": "qwen2.5-rlla"}
CALL = '{"name": "search", "parameters": {"q": "paris", "k": 3}}'
TRUTH = f"<think>x</think>\n<tool_call>\n{CALL}\n</tool_call>"


def turn(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>"


def test_match_score_counts_repeats():
    assert match_score(["a", "a", "b"], ["a", "b", "b"]) == pytest.approx(2 / 4)
    assert match_score([], []) == 1.0 and match_score(["a"], []) == 0.0


def test_exact_call_scores_the_maximum():
    assert compute_score("d", turn(f"<think>plan</think>\n<tool_call>\n{CALL}\n</tool_call>"), TRUTH, QWEN) == {
        "score": 4.0, "format_reward": 1.0, "accuracy_reward": 3.0}


def test_partial_call_is_scaled_between_minus_three_and_three():
    # names match (1) + parameter names match (1) + one of two values (1) = 3 of 1 + (1 + 2) = 4
    partial = '{"name": "search", "parameters": {"q": "paris", "k": 5}}'
    result = compute_score("d", turn(f"<think>p</think>\n<tool_call>\n{partial}\n</tool_call>"), TRUTH, QWEN)
    assert result["accuracy_reward"] == pytest.approx(6 * 3 / 4 - 3)
    assert tool_call_reward([{"name": "a", "parameters": {}}], [{"name": "b", "parameters": {}}], 3, -3) == -3


def test_bad_format_and_missing_or_broken_calls():
    no_think = compute_score("d", turn(f"<tool_call>\n{CALL}\n</tool_call>"), TRUTH, QWEN)
    assert no_think == {"score": 3.0, "format_reward": 0.0, "accuracy_reward": 3.0}
    assert compute_score("d", turn("<think>p</think>"), TRUTH, QWEN)["accuracy_reward"] == -3.0
    broken = turn("<think>p</think>\n<tool_call>\n{not json\n</tool_call>")
    assert compute_score("d", broken, TRUTH, QWEN)["accuracy_reward"] == -3.0


def test_response_only_truth_and_model_family():
    truth = "<think>x</think>\n<response>hi</response>"
    response = "<|start_header_id|>assistant<|end_header_id|><think>a</think>\n<response>yo</response><|eot_id|>"
    assert compute_score("d", response, truth, {"experiment_name": "llama3-8b"}) == {
        "score": 1.0, "format_reward": 1.0, "accuracy_reward": 0.0}
    with pytest.raises(ValueError, match="neither llama nor qwen"):
        compute_score("d", "x", truth, {"experiment_name": "mistral"})
