"""DAPO's math reward (verl `math_dapo`; data sources `math_dapo`, `math`, `math_dapo_reasoning`, `aime*`).

Only the last 300 characters are read. The answer is the last `Answer: ...` line (Minerva style),
normalized (units, `\\text{}`, shorthand fractions, thousands commas); when there is none, the last
`\\boxed{}` in the final 100 characters, compared verbatim. Result: {"score": 1.0 or -1.0, "acc": bool,
"pred": str}. This is verl's current definition; verl before its August-2026 tree had no `\\boxed{}`
fallback (a response without `Answer:` scored -1 with pred "[INVALID]").
"""

from __future__ import annotations

import re
from typing import Any

INVALID = "[INVALID]"
_SUBSTITUTIONS = (("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), (r"\ ", ""), (" ", ""), ("mbox", "text"),
                  (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"))
_REMOVED = ("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
            "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
            "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
            "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;",
            r",\!", "{,}", '"', "\\dots")
_ANSWER = r"(?i)Answer\s*:\s*([^\n]+)"


def last_boxed_only_string(text: str) -> str | None:
    """The last `\\boxed{...}` with balanced braces, or None (only `\\boxed{`, not `\\boxed ` or `\\fbox`)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for position in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if text[position] == "}" and depth == 0:
            return text[start:position + 1]
    return None


def normalize_final_answer(answer: str) -> str:
    """Minerva's normalization of a final answer (Lewkowycz et al. 2022, appendix D.1)."""
    answer = answer.split("=")[-1]
    for before, after in _SUBSTITUTIONS:
        answer = answer.replace(before, after)
    for expression in _REMOVED:
        answer = answer.replace(expression, "")
    answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", answer)
    for command in ("text", "textbf", "overline"):
        answer = re.sub(rf"(\\{command}\{{)(.*?)(\}})", "\\2", answer)
    answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", answer)
    answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", answer)  # \fracab -> \frac{a}{b}
    answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", answer)  # \sqrta -> \sqrt{a}
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


def is_correct_minerva(solution: str, ground_truth: str) -> tuple[bool, str]:
    """(correct?, normalized prediction) from the last `Answer:` line; prediction "[INVALID]" when absent."""
    matches = re.findall(_ANSWER, solution)
    prediction = normalize_final_answer(matches[-1] if matches else INVALID)
    return prediction == normalize_final_answer(ground_truth), prediction


def is_correct_strict_box(solution: str, ground_truth: str,
                          pause_tokens_index: list[int] | None = None) -> tuple[int, str | None]:
    """(1 or -1, boxed content or None): the last `\\boxed{}` in the final 100 characters, verbatim."""
    if pause_tokens_index is not None:
        if len(pause_tokens_index) != 4:
            raise ValueError(f"pause_tokens_index needs 4 positions, got {pause_tokens_index}")
        solution = solution[pause_tokens_index[-1] - 100:]
    else:
        solution = solution[-100:]
    boxed = last_boxed_only_string(solution)
    prediction = boxed[len("\\boxed{"):-1] if boxed is not None else None
    return (1 if prediction == ground_truth else -1), prediction


def verify(solution: str, ground_truth: str, strict_box_verify: bool = False,
           pause_tokens_index: list[int] | None = None) -> tuple[bool, str | None]:
    if strict_box_verify:
        correct, prediction = is_correct_strict_box(solution, ground_truth, pause_tokens_index)
        return correct == 1, prediction
    correct, prediction = is_correct_minerva(solution, ground_truth)
    if prediction != INVALID:
        return correct, prediction
    box_correct, box_prediction = is_correct_strict_box(solution, ground_truth, pause_tokens_index)
    if box_prediction is not None:
        return box_correct == 1, box_prediction
    return correct, prediction


def compute_score(solution_str: str, ground_truth: str, strict_box_verify: bool = False,
                  pause_tokens_index: list[int] | None = None) -> dict[str, Any]:
    """{"score": 1.0 / -1.0, "acc": bool, "pred": the prediction} on the last 300 characters."""
    correct, prediction = verify(solution_str[-300:], ground_truth, strict_box_verify, pause_tokens_index)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": prediction}
