"""PRIME's math reward (verl `prime_math`; the `numina_*` data sources): 1.0 when the answer matches.

The answer is what follows the last "answer:"/"answer is", else the last boxed expression, cut at the
last ". " and after the last "is "/"="/": " marker (it must contain a digit). It is graded by the PRM800K
grader, then by ToRA's `math_equal` (string, numeric with percentage variants within 1e-4 relative,
tuples/intervals element-wise, points, matrices; with `\\pi` both pi and 3.14 are tried).

As in verl: `math_equal`'s final symbolic step never succeeds (verl's `timeout_limit` is used as a context
manager, which raises before sympy runs, and the error is swallowed), so it is absent here. Where verl
`eval`s model text (`\\pi` arithmetic, list-literal matrices) `safe_eval` is used: the same values for
arithmetic and lists, and nothing else is run. The matrix branch still hands `Matrix(...)` text to
sympy's `parse_expr`, as verl does.
"""

from __future__ import annotations

import math
import re
from math import isclose
from typing import Any

from hybridrl.rewards.prm800k import grade_answer
from hybridrl.rewards.safe_eval import safe_eval

_FORWARD_MARKERS = ("answer:", "answer is", "answers are")
_BACKWARD_MARKERS = ("is answer", "is the answer", "are answers", "are the answers")
_LAST_MARKERS = ("be ", "is ", "are ", "=", ": ", "get ", "be\n", "is\n", "are\n", ":\n", "get\n")
_INTERVALS = (("Interval(", r"^Interval\((.*)\)$", "[{}]"), ("Interval.Ropen(", r"^Interval\.Ropen\((.*)\)$", "[{})"),
              ("Interval.Lopen(", r"^Interval\.Lopen\((.*)\)$", "({}]"), ("Interval.open(", r"^Interval\.open\((.*)\)$", "({})"))


def last_boxed_content(text: str) -> str | None:
    """The stripped content of the last `\\boxed{...}` / `\\fbox{...}` (nested braces), or None."""
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
    if start < 0:
        return None
    depth, opening = 0, None
    for position in range(start, len(text)):
        if text[position] == "{":
            depth += 1
            opening = position if opening is None else opening
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[opening + 1:position].strip() if opening is not None else None
    return None


def _after_last(response: str, markers: tuple[str, ...], matched: bool) -> tuple[str, bool]:
    for marker in markers:
        index = response.lower().rfind(marker)
        if index != -1:
            matched, response = True, response[index + len(marker):].strip()
            if response.endswith("\n"):
                response = response[:-2]
    return response, matched


def match_answer(response: str) -> tuple[bool, str]:
    """(found an answer containing a digit?, the extracted answer)."""
    response, matched = _after_last(response, _FORWARD_MARKERS, False)
    for marker in _BACKWARD_MARKERS:
        index = response.lower().rfind(marker)
        if index != -1:
            matched, response = True, response[:index].strip()
            if response.endswith("\n"):
                response = response[:-2]
    boxed = last_boxed_content(response)
    if boxed:
        matched, response = True, boxed
    if ". " in response and response.lower().rfind(". ") != -1:
        response = response[:response.lower().rfind(". ")].strip()
    response, matched = _after_last(response, _LAST_MARKERS, matched)
    return matched and any(char.isdigit() for char in response), response


def is_digit(value: Any) -> tuple[bool, float | None]:
    try:
        text = str(value)
        return True, float(text.replace("{,}", "") if "{,}" in text else text.replace(",", ""))
    except ValueError:
        return False, None


def _handle_pi(text: str, pi: float) -> Any:
    """`2\\pi` -> 2*pi, `\\pi` -> 1*pi, then evaluated when the result is arithmetic."""
    index = text.find("\\pi")
    while index != -1:
        factor = "*" if index > 0 and text[index - 1].isdigit() else "1*"
        text = text[:index] + f"{factor}{pi}" + text[index + 3:]
        index = text.find("\\pi", index + 1)
    try:
        return safe_eval(text)
    except Exception:
        return text


def normalize(answer: Any, pi: float) -> Any:
    """`$5` -> `5`, `5%` -> `5`, `101_2` -> 101 (base subscripts dropped; ValueError if not a number), `\\pi`."""
    if isinstance(answer, str) and re.match(r"\$\d+(\.\d+)?", answer):
        return answer[1:]
    if isinstance(answer, str) and (re.match(r"^\d+(\.\d+)?%$", answer) or re.match(r"^\d+(\.\d+)?\\%$", answer)):
        return answer.replace("\\%", "").replace("%", "")
    if isinstance(answer, str) and "_" in answer:
        answer = int(float(answer.split("_")[0]))
    if isinstance(answer, str) and "\\pi" in answer:
        answer = _handle_pi(answer, pi)
    return answer


def format_intervals(prediction: str) -> str:
    """sympy's `Interval(a, b)` family -> bracket notation."""
    for _, pattern, template in _INTERVALS:
        match = re.match(pattern, prediction)
        if match:
            return template.format(match.group(1))
    return prediction


def _numbers_equal(prediction: Any, reference: Any, include_percentage: bool, tolerance: float) -> bool | None:
    """None when either side is not a number; else equal within `tolerance` (also reference x100 and /100)."""
    if not (is_digit(prediction)[0] and is_digit(reference)[0]):
        return None
    prediction, reference = is_digit(prediction)[1], is_digit(reference)[1]
    candidates = [reference / 100, reference, reference * 100] if include_percentage else [reference]
    return any(isclose(candidate, prediction, rel_tol=tolerance) for candidate in candidates)


def _parts_equal(pred_parts: list, ref_parts: list, include_percentage: bool, tolerance: float) -> bool:
    return len(pred_parts) == len(ref_parts) and all(
        math_equal(p, r, include_percentage, tolerance) for p, r in zip(pred_parts, ref_parts))


def _brackets_equal(prediction: str, reference: str) -> bool:
    """Equal once brackets are ignored (a tuple answered as an interval of the other kind keeps its brackets)."""
    pred_text, ref_text = prediction, reference
    if ((prediction.startswith("[") and prediction.endswith("]") and not reference.startswith("("))
            or (prediction.startswith("(") and prediction.endswith(")") and not reference.startswith("["))):
        pred_text, ref_text = pred_text.strip("[]()"), ref_text.strip("[]()")
    for bracket in "{}()":
        pred_text, ref_text = pred_text.replace(bracket, ""), ref_text.replace(bracket, "")
    return pred_text == ref_text


def _matrix_equal(prediction: str, reference: str, include_percentage: bool, tolerance: float) -> bool:
    """A `\\begin{pmatrix}` reference against a sympy `Matrix(...)` or a list literal."""
    if prediction.startswith("Matrix"):
        try:
            from sympy.parsing.sympy_parser import parse_expr

            return _parts_equal(list(parse_expr(prediction)), reference.split()[1:-1:2], include_percentage, tolerance)
        except Exception:
            return False
    if not (prediction.startswith("[") and prediction.endswith("]")) or not isinstance(safe_eval(prediction), list):
        return False
    try:
        rows = (reference.removeprefix(r"\\begin{pmatrix}").removeprefix(r"\begin{pmatrix}")
                .removesuffix(r"\\end{pmatrix}").removesuffix(r"\end{pmatrix}")).split("\\")
        rows = [row.split("&") if "&" in row else row for row in rows]
        return _parts_equal(safe_eval(prediction), rows, include_percentage, tolerance)
    except Exception:
        return False


def math_equal(prediction: Any, reference: Any, include_percentage: bool = True, tolerance: float = 1e-4,
               timeout: float = 10.0, pi: float = math.pi) -> bool:
    """ToRA's equivalence: strings, numbers, tuples/intervals, points and matrices (raises on odd input, as verl).

    `timeout` is accepted for verl's signature; nothing here runs long (see the module doc)."""
    prediction, reference = normalize(prediction, pi), normalize(reference, pi)
    if isinstance(prediction, str) and len(prediction) > 1000:
        prediction = prediction[:1000]
    if isinstance(prediction, str) and isinstance(reference, str):
        if prediction.strip().lower() == reference.strip().lower():
            return True
        if prediction.replace(" ", "") == reference.replace(" ", ""):
            return True
    try:
        numbers = _numbers_equal(prediction, reference, include_percentage, tolerance)
        if numbers is not None:
            return numbers
    except Exception:
        pass
    if not prediction and prediction not in [0, False]:
        return False
    reference, prediction = str(reference).strip(), format_intervals(str(prediction).strip())
    if _brackets_equal(prediction, reference):
        return True
    if (prediction and reference and prediction[0] in "([" and prediction[-1] in ")]"
            and prediction[0] == reference[0] and prediction[-1] == reference[-1]
            and _parts_equal(prediction[1:-1].split(","), reference[1:-1].split(","), include_percentage, tolerance)):
        return True
    if "," in prediction and "," in reference:
        pred_parts = [item.strip() for item in prediction.split(",")]
        ref_parts = [item.strip() for item in reference.split(",")]
        if len(pred_parts) == len(ref_parts):
            return _parts_equal(pred_parts, ref_parts, include_percentage, tolerance)
    if prediction.startswith("Point") and reference[0] == "(" and reference[-1] == ")":
        pred_parts = prediction[prediction.find("(") + 1:-1].split(",")
        if _parts_equal(pred_parts, reference[1:-1].split(","), include_percentage, tolerance):
            return True
    if r"\begin{pmatrix}" in reference:
        return _matrix_equal(prediction, reference, include_percentage, tolerance)
    return False


def compute_score(model_output: str, ground_truth: str) -> tuple[bool, bool, str]:
    """verl's (is_correct, format_correctness, extracted answer); `score` below is the reward."""
    model_output, ground_truth = str(model_output), str(ground_truth)
    _, extracted = match_answer(model_output)
    format_correct = "Step 2:" in model_output and "\\box" in model_output
    if grade_answer(extracted, ground_truth):
        return True, True, extracted
    try:
        if "\\pi" in extracted or "\\pi" in ground_truth:
            correct = any(math_equal(extracted, ground_truth, timeout=True, pi=pi) for pi in (math.pi, 3.14))
        else:
            correct = math_equal(extracted, ground_truth, timeout=True)
    except Exception:
        correct = False
    return correct, format_correct, extracted


def score(solution_str: str, ground_truth: str) -> float:
    """1.0 if the answer is correct, else 0.0 (verl's default_compute_score of prime_math)."""
    return float(compute_score(solution_str, ground_truth)[0])
