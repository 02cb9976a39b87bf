"""The PRM800K answer grader (OpenAI, Lightman et al. 2023): equal after normalization, or sympy finds the
difference 0. verl grades `numina_*` (prime_math) with one copy of it and geometry3k with another (the
`mathruler` package's); `flavor` picks which: "prime" or "mathruler". They differ in the unit words
removed, whether spaces, braces and bare `%` are dropped, and mathruler's sympy call has no time limit
(here both get verl's 10 s, so a pathological answer cannot hang training).

LaTeX answers go through pylatexenc's latex->text first; without pylatexenc that step is skipped (as
verl skips it when it fails), so fewer LaTeX answers are recognised.
"""

from __future__ import annotations

import re

from hybridrl.rewards.hendrycks import strip_string
from hybridrl.rewards.optional import optional
from hybridrl.rewards.timeout import call_with_timeout

SYMPY_TIMEOUT_SECONDS = 10
_BAD_SUBSTRINGS = ("^{", "^(")  # sympy might hang on these
_BAD_REGEXES = (r"\^[0-9]+\^", r"\^[0-9][0-9]+")
_TUPLE_CHARS = "()[]"
_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month", "year",
          "foot", "feet", "inch", "yard")
_UNITS_BY_FLAVOR = {"prime": _UNITS + ("liter",), "mathruler": _UNITS}
_LATEX_SYMBOLS = (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*"))


def normalize_answer(answer: str | None, flavor: str = "prime") -> str | None:
    """MATH's `normalize_answer`: strip, unwrap `\\text{...}`, Hendrycks `strip_string` (kept as is if that fails)."""
    if answer is None:
        return None
    answer = answer.strip()
    try:
        match = re.search(r"^\\text\{(?P<text>.+?)\}$", answer)
        if match is not None:
            answer = match.group("text").strip()
        return strip_string(answer, drop_bare_percent=flavor == "mathruler")
    except Exception:
        return answer


def _parse_latex(expr: str) -> str:
    """LaTeX -> plain text sympy can read (`\\frac{1}{2}` -> `1/2`, `\\sqrt` -> `sqrt`, `\\pi` -> `pi`)."""
    latex2text = optional("pylatexenc", "LaTeX answers are compared without converting them to plain text")
    if latex2text is None:
        raise ImportError("pylatexenc")
    from pylatexenc.latex2text import LatexNodes2Text

    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = LatexNodes2Text().latex_to_text(expr)
    for symbol, name in _LATEX_SYMBOLS:
        expr = expr.replace(symbol, name)
    return expr.strip()


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _is_int(value: float) -> bool:
    try:
        return abs(value - int(round(value))) <= 1e-7
    except Exception:  # inf, nan
        return False


def _is_frac(expr: str) -> bool:
    return bool(re.search(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$", expr))


def _strip_properly_formatted_commas(expr: str) -> str:
    """`1,000,000` -> `1000000`, leaving tuple commas (`(1,2)`) alone."""
    pattern = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
    while True:
        stripped = pattern.sub(r"\1\3\4", expr)
        if stripped == expr:
            return stripped
        expr = stripped


def _str_is_int(text: str) -> bool:
    try:
        return _is_int(float(_strip_properly_formatted_commas(text)))
    except Exception:
        return False


def _normalize(expr: str | None, flavor: str) -> str | None:
    """PRM800K's normalization before the sympy comparison."""
    if expr is None:
        return None
    match = re.search(r"^\\text\{(?P<text>.+?)\}$", expr)
    if match is not None:
        expr = match.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for unit in _UNITS_BY_FLAVOR[flavor]:
        expr = re.sub(f"{unit}(es)?(s)? *(\\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if len(expr) > 0 and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(",\\\\! *", "", expr)
    if _is_float(expr) and _is_int(float(expr)):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        try:
            expr = _parse_latex(expr)
        except Exception:
            pass
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", "\\1+\\2", expr)  # a mixed number: 7 3/4 -> 7+3/4
    if flavor == "mathruler":
        expr = expr.replace(" ", "").replace("{", "").replace("}", "")
    expr = expr.lower()
    if _str_is_int(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _should_allow_eval(expr: str) -> bool:
    """Refuse text with more than two distinct letters (unknown words) and exponents sympy may hang on."""
    letters = {char for char in expr.replace("sqrt", "").replace("frac", "") if char.isalpha()}
    if len(letters) > 2 or any(bad in expr for bad in _BAD_SUBSTRINGS):
        return False
    return all(re.search(bad, expr) is None for bad in _BAD_REGEXES)


def sympy_difference_is_zero(ground_truth: str, given: str) -> bool:
    """sympy.simplify((ground_truth) - (given)) == 0, False when it cannot parse (runs in a child process)."""
    import sympy
    from sympy.parsing import sympy_parser

    expr = f"({ground_truth})-({given})"
    if not _should_allow_eval(expr):
        return False
    transformations = sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,)
    try:
        return sympy.simplify(sympy_parser.parse_expr(expr.replace("^", "**"), transformations=transformations)) == 0
    except Exception:
        return False


def _split_tuple(expr: str) -> list[str]:
    """Elements of a tuple/interval `(a, b)`; a single element otherwise."""
    expr = _strip_properly_formatted_commas(expr)
    if not expr:
        return []
    if (len(expr) > 2 and expr[0] in _TUPLE_CHARS and expr[-1] in _TUPLE_CHARS
            and all(char not in expr[1:-1] for char in _TUPLE_CHARS)):
        return [element.strip() for element in expr[1:-1].split(",")]
    return [expr]


def _elements_equal(truth: str, given: str) -> bool:
    if _is_frac(truth) and _is_frac(given):
        return truth == given  # unreduced fractions are wrong, so no sympy here
    if _str_is_int(truth) != _str_is_int(given):
        return False  # an integer answer must match exactly
    if not _should_allow_eval(f"({truth})-({given})"):
        return False  # decided here to spare a process start; the child checks again
    try:
        return call_with_timeout(sympy_difference_is_zero, (truth, given), SYMPY_TIMEOUT_SECONDS)
    except (TimeoutError, RuntimeError):
        return False


def grade_answer(given_answer: str | None, ground_truth: str, flavor: str = "prime") -> bool:
    """True when the answers normalize to the same string, or sympy finds them equal element by element."""
    if flavor not in _UNITS_BY_FLAVOR:
        raise ValueError(f"grader flavor {flavor!r} is unknown; use one of {sorted(_UNITS_BY_FLAVOR)}")
    if given_answer is None:
        return False
    if normalize_answer(ground_truth, flavor) == normalize_answer(given_answer, flavor):
        return True
    truth, given = _normalize(ground_truth, flavor), _normalize(given_answer, flavor)
    if truth is None:
        return False
    if truth == given:
        return True
    if len(given) == 0:
        return False
    truth_elements, given_elements = _split_tuple(truth), _split_tuple(given)
    if len(truth_elements) > 1 and (truth[0] != given[0] or truth[-1] != given[-1]):
        return False
    if len(truth_elements) != len(given_elements):
        return False
    return all(_elements_equal(t, g) for t, g in zip(truth_elements, given_elements))
