"""Search-R1 QA reward (verl `search_r1_like_qa_em`; the `searchR1_*` data sources): exact match of the last
`<answer>...</answer>` against any of `ground_truth["target"]` after SQuAD normalization (lower case, no
punctuation, no articles, single spaces). `score` when it matches (a quarter of it when the response
has more than 10 opening or closing answer tags), `format_score` for a wrong answer, 0 without one.
"""

from __future__ import annotations

import re
import string
from typing import Any

_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _targets(golden_answers: Any) -> list:
    return [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)


def em_check(prediction: str, golden_answers: Any) -> int:
    """1 if the normalized prediction equals a normalized golden answer."""
    normalized = normalize_answer(prediction)
    return int(any(normalize_answer(answer) == normalized for answer in _targets(golden_answers)))


def subem_check(prediction: str, golden_answers: Any) -> int:
    """1 if a normalized golden answer is a substring of the normalized prediction."""
    normalized = normalize_answer(prediction)
    return int(any(normalize_answer(answer) in normalized for answer in _targets(golden_answers)))


def extract_solution(solution_str: str) -> str | None:
    """The stripped content of the last `<answer>...</answer>`, or None."""
    matches = list(re.finditer(r"<answer>(.*?)</answer>", solution_str, re.DOTALL))
    return matches[-1].group(1).strip() if matches else None


def compute_score(solution_str: str, ground_truth: dict, method: str = "strict", format_score: float = 0.0,
                  score: float = 1.0) -> float:
    """Exact match (`method` is accepted for verl's signature and unused, as in verl)."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0
    if not em_check(answer, ground_truth["target"]):
        return format_score
    too_many_tags = solution_str.count("<answer>") > 10 or solution_str.count("</answer>") > 10
    return score / 4 if too_many_tags else score


def compute_score_subem(solution_str: str, ground_truth: dict, method: str = "strict", format_score: float = 0.0,
                        score: float = 1.0) -> float:
    """Substring exact match."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0
    return score if subem_check(answer, ground_truth["target"]) else format_score
