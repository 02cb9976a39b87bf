"""GSM8K rule reward, verl HEAD semantics (verl/utils/reward_score/gsm8k.py): the answer after the last "#### "."""

from __future__ import annotations

import re

# Only the tail is searched: long responses are slow to regex and the answer is expected at the end (verl PR #2568).
SOLUTION_CLIP_CHARS = 300
_STRICT_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
_ANY_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")
_INVALID_FLEXIBLE = ("", ".")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The final answer in the last 300 chars: strict = last "#### N" (`,`/`$` removed); flexible = last number."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k answer extraction method {method!r} is unknown; use 'strict' or 'flexible'")
    tail = solution_str[-SOLUTION_CLIP_CHARS:]
    if method == "strict":
        matches = _STRICT_ANSWER.findall(tail)
        return matches[-1].replace(",", "").replace("$", "") if matches else None
    matches = _ANY_NUMBER.findall(tail)
    if not matches:
        return None
    valid = [match for match in reversed(matches) if match not in _INVALID_FLEXIBLE]
    # verl's loop leaves the last value it looked at when none is valid, i.e. the first match.
    return valid[0] if valid else matches[0]


def compute_score(solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0,
                  score: float = 1.0) -> float:
    """`score` if the extracted answer equals `ground_truth` as a string ("72.0" != "72"), `format_score` if it
    differs, 0 when no answer is found."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return score if answer == ground_truth else format_score
