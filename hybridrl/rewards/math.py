"""MATH rule reward: the last `\\boxed{}` answer compared with the ground truth after hendrycks-style
normalization (as verl's math reward), falling back to `math-verify` equivalence when it is installed.
"""

from __future__ import annotations

import re


def last_boxed_only_string(text: str) -> str | None:
    """The last `\\boxed{...}` (nested braces), `\\boxed x` or `\\fbox{...}` in `text`, or None.

    Unlike verl, a `\\boxed x` earlier in the text does not win over a later `\\boxed{y}`: the last one counts.
    """
    start = text.rfind("\\boxed")
    if start >= 0 and text.startswith("\\boxed ", start):
        # `\boxed 5$`: the answer runs to the next `$` (verl/hendrycks).
        return "\\boxed " + text[start + len("\\boxed "):].split("$")[0]
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
    """The content of `\\boxed{x}`, `\\fbox{x}` or `\\boxed x`."""
    for opening in ("\\boxed ", "\\boxed{", "\\fbox{"):
        if boxed.startswith(opening):
            return boxed[len(opening):] if opening.endswith(" ") else boxed[len(opening):-1]
    raise ValueError(f"{boxed[:80]!r} does not start with \\boxed or \\fbox")


def extract_boxed_answer(text: str) -> str | None:
    """The content of the last boxed answer in `text`, or None when there is none (or its braces never close)."""
    boxed = last_boxed_only_string(text)
    return None if boxed is None else remove_boxed(boxed)


def _fix_fracs(text: str) -> str:
    """`\\frac12` → `\\frac{1}{2}`, `\\frac1{72}` → `\\frac{1}{72}`, `\\frac1b` → `\\frac{1}{b}`."""
    head, *parts = text.split("\\frac")
    fixed = head
    for part in parts:
        fixed += "\\frac"
        if part.startswith("{"):
            fixed += part
        elif len(part) < 2:
            return text  # malformed (`\frac` or `\frac1` at the end): leave it for exact comparison
        elif part[1] == "{":
            fixed += "{" + part[0] + "}" + part[1:]
        else:
            fixed += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
    return fixed


def _fix_a_slash_b(text: str) -> str:
    """`3/4` → `\\frac{3}{4}` for plain integers only."""
    match = re.fullmatch(r"(-?\d+)/(-?\d+)", text)
    if not match or text != f"{int(match[1])}/{int(match[2])}":
        return text
    return "\\frac{" + match[1] + "}{" + match[2] + "}"


def _fix_sqrt(text: str) -> str:
    """`\\sqrt3` → `\\sqrt{3}`."""
    return re.sub(r"\\sqrt([^{\\])", r"\\sqrt{\1}", text)


def _remove_right_units(text: str) -> str:
    # In MATH, "\text{ " (with a space) only introduces units, e.g. "10\text{ inches}".
    return text.split("\\text{ ")[0] if "\\text{ " in text else text


_PLAIN_REMOVALS = ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$", "\\%")


def strip_string(text: str) -> str:
    """Hendrycks MATH normalization: drop spacing/sizing/degree/dollar/percent/units, canonical fractions."""
    text = text.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    for token in _PLAIN_REMOVALS:
        text = text.replace(token, "")
    text = _remove_right_units(text)
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text.startswith("."):
        text = "0" + text
    # "k = 5" → "5": a short left-hand side is a variable name, not part of the answer.
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        text = sides[1]
    text = _fix_sqrt(text).replace(" ", "")
    text = _fix_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _fix_a_slash_b(text)


def is_equiv(answer: str | None, ground_truth: str | None) -> bool:
    """Equal after `strip_string` on both sides (None equals only None)."""
    if answer is None or ground_truth is None:
        return answer is None and ground_truth is None
    return strip_string(answer) == strip_string(ground_truth)


def math_verify_equiv(answer: str, ground_truth: str) -> bool:
    """Symbolic equivalence by the optional `math-verify` package (`pip install 'hybridrl[math]'`)."""
    try:
        from math_verify import parse, verify
    except ImportError as error:
        raise ImportError("math-verify is not installed; pip install 'hybridrl[math]'") from error
    return bool(verify(parse(f"${ground_truth}$"), parse(f"${answer}$")))


def math_verify_available() -> bool:
    try:
        import math_verify  # noqa: F401
    except ImportError:
        return False
    return True


def compute_score(solution_str: str, ground_truth: str, use_math_verify: bool | None = None) -> float:
    """1.0 if the last boxed answer equals `ground_truth` after normalization (or by math-verify), else 0.0.

    `use_math_verify`: None = use it when installed; True = require it; False = normalization only.
    """
    answer = extract_boxed_answer(solution_str)
    if answer is None:
        return 0.0
    if is_equiv(answer, str(ground_truth)):
        return 1.0
    if use_math_verify or (use_math_verify is None and math_verify_available()):
        return 1.0 if math_verify_equiv(answer, str(ground_truth)) else 0.0
    return 0.0
