"""Geometry3K reward (verl `geo3k`, data source `hiyouga/geometry3k`):
(1 - format_score) * accuracy + format_score * format, with format_score 0.1 by default.

Format: the response is `<think>...</think>` then anything with a `\\boxed{...}`. Accuracy: the last
`\\boxed{}`'s content graded by mathruler's PRM800K grader (`prm800k.grade_answer(flavor="mathruler")`,
reimplemented so the `mathruler` package is not needed).
"""

from __future__ import annotations

import re

from hybridrl.rewards.prm800k import grade_answer

_FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def extract_boxed_content(text: str) -> str:
    """The stripped content of the last `\\boxed{...}`, or the string "None" when there is none (mathruler)."""
    start = text.rfind(r"\boxed{")
    if start == -1:
        return "None"
    content, depth = text[start + len(r"\boxed{"):], 0
    for position, char in enumerate(content):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == -1:
            return content[:position].strip()
    return "None"


def format_reward(predict_str: str) -> float:
    return 1.0 if _FORMAT.fullmatch(predict_str) else 0.0


def acc_reward(predict_str: str, ground_truth: str, use_boxed: bool = True) -> float:
    answer = extract_boxed_content(predict_str) if use_boxed else predict_str
    return 1.0 if grade_answer(answer, ground_truth, flavor="mathruler") else 0.0


def compute_score(predict_str: str, ground_truth: str, use_boxed: bool = True, format_score: float = 0.1) -> float:
    return ((1.0 - format_score) * acc_reward(predict_str, ground_truth, use_boxed)
            + format_score * format_reward(predict_str))
