"""Hendrycks MATH answer normalization (`strip_string`), exactly as verl's math_reward and prime_math use it.

Malformed input raises, as in verl (a `\\frac` or `\\sqrt` with nothing after it, two `\\text{ ` unit
markers); each caller decides what that means: MATH compares the raw strings, prime_math keeps the answer.
"""

from __future__ import annotations


def fix_fracs(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{72}` -> `\\frac{1}{72}`; a one-character tail is left as it was."""
    head, *parts = text.split("\\frac")
    fixed = head
    for part in parts:
        fixed += "\\frac"
        if part[0] == "{":  # IndexError on `\frac` with nothing after it, as in verl
            fixed += part
        elif len(part) < 2:
            return text
        elif part[1] != "{":
            fixed += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
        else:
            fixed += "{" + part[0] + "}" + part[1:]
    return fixed


def fix_a_slash_b(text: str) -> str:
    """`3/4` -> `\\frac{3}{4}` when both sides are integers written plainly."""
    sides = text.split("/")
    if len(sides) != 2:
        return text
    try:
        numerator, denominator = int(sides[0]), int(sides[1])
    except ValueError:
        return text
    if text != f"{numerator}/{denominator}":
        return text
    return "\\frac{" + str(numerator) + "}{" + str(denominator) + "}"


def remove_right_units(text: str) -> str:
    """In MATH, `\\text{ ` (with a space) only introduces units: `10\\text{ inches}` -> `10`."""
    if "\\text{ " not in text:
        return text
    splits = text.split("\\text{ ")
    if len(splits) != 2:
        raise ValueError(f"more than one unit marker in {text[:80]!r}")
    return splits[0]


def fix_sqrt(text: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}` (one character)."""
    if "\\sqrt" not in text:
        return text
    head, *parts = text.split("\\sqrt")
    return head + "".join("\\sqrt" + part if part[0] == "{" else "\\sqrt{" + part[0] + "}" + part[1:]
                          for part in parts)


_REMOVED = ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$")


def strip_string(text: str, drop_bare_percent: bool = False) -> str:
    """Hendrycks normalization: spacing, sizing, degrees, dollars, units, percent, leading zeros, `k=`, fractions.

    `drop_bare_percent`: also drop `%` without a backslash (mathruler's copy, used by geometry3k, does)."""
    text = text.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    for token in _REMOVED:
        text = text.replace(token, "")
    text = remove_right_units(text)
    text = text.replace("\\\\%", "").replace("\\%", "")
    if drop_bare_percent:
        text = text.replace("%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "k = 5" -> "5"
        text = sides[1]
    text = fix_sqrt(text).replace(" ", "")
    text = fix_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return fix_a_slash_b(text)
