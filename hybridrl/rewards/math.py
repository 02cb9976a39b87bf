"""MATH rule reward, as verl's `math_reward` (lighteval/MATH, MATH-lighteval, MATH-500): 1.0 when the last
`\\boxed{}` answer equals the ground truth after Hendrycks normalization, else 0.0.

verl's quirks are kept because they change scores: a `\\boxed ` (with a space) anywhere in the text wins
over later `\\boxed{}`s; an `\\fbox{}` answer scores 0 (verl finds it, then fails to unbox it); when
normalization fails on malformed LaTeX the raw strings are compared. `use_math_verify=True` (not verl's
default) also accepts answers math-verify finds equivalent.
"""

from __future__ import annotations

from typing import Any

from hybridrl.rewards.hendrycks import strip_string
from hybridrl.rewards.optional import require


def last_boxed_only_string(text: str) -> str | None:
    """The last `\\boxed{...}` (nested braces) or `\\fbox{...}`, `\\boxed x` up to the next `$`, or None."""
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
    if start < 0:
        return None
    depth = 0
    for position in range(start, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[start:position + 1]
    return None


def remove_boxed(boxed: str) -> str:
    """The content of `\\boxed x` or `\\boxed{x}`; ValueError for anything else (e.g. `\\fbox{x}`)."""
    if "\\boxed " in boxed:
        if not boxed.startswith("\\boxed "):
            raise ValueError(f"{boxed[:80]!r} does not start with '\\boxed '")
        return boxed[len("\\boxed "):]
    if not (boxed.startswith("\\boxed{") and boxed.endswith("}")):
        raise ValueError(f"{boxed[:80]!r} is not a \\boxed{{...}} answer")
    return boxed[len("\\boxed{"):-1]


def extract_boxed_answer(text: str) -> str | None:
    """The content of the last `\\boxed`/`\\fbox` answer, or None (no box, or an unclosed brace). For reading
    reference solutions (preprocessing); scoring unboxes as verl does, where an `\\fbox` answer fails."""
    boxed = last_boxed_only_string(text)
    if boxed is None:
        return None
    if boxed.startswith("\\fbox{"):
        return boxed[len("\\fbox{"):-1]
    return remove_boxed(boxed)


def _verl_boxed_answer(text: str) -> str | None:
    """verl's unboxing: None when there is no box or it is not a `\\boxed` one (an `\\fbox`)."""
    boxed = last_boxed_only_string(text)
    if boxed is None:
        return None
    try:
        return remove_boxed(boxed)
    except ValueError:
        return None


def is_equiv(answer: str | None, ground_truth: Any) -> bool:
    """Equal after `strip_string` on both sides; raw equality when normalization fails (verl)."""
    if answer is None or ground_truth is None:
        return answer is None and ground_truth is None
    try:
        return strip_string(answer) == strip_string(ground_truth)
    except Exception:  # malformed LaTeX, or a ground truth that is not a string
        return answer == ground_truth


def math_verify_equiv(answer: str, ground_truth: str) -> bool:
    """Symbolic equivalence by math-verify (`pip install 'hybridrl[math]'`)."""
    math_verify = require("math_verify", "reward scoring with use_math_verify=True")
    return bool(math_verify.verify(math_verify.parse(f"${ground_truth}$"), math_verify.parse(f"${answer}$")))


def compute_score(solution_str: str, ground_truth: Any, use_math_verify: bool = False) -> float:
    """1.0 if the last boxed answer is equivalent to `ground_truth`, else 0.0 (no answer, or an `\\fbox`: 0.0)."""
    answer = _verl_boxed_answer(solution_str)
    if answer is None:
        return 0.0
    if is_equiv(answer, ground_truth):
        return 1.0
    return 1.0 if use_math_verify and math_verify_equiv(answer, str(ground_truth)) else 0.0
