"""`calculator`: exact arithmetic for the model, evaluated safely from the expression's syntax tree (no `eval`).

Use it as `multi_turn.function_tool_path=hybridrl.rollout.tools.builtin.calculator`. Integers stay exact;
sizes are bounded so a call such as `9**9**9` is refused instead of running for hours.
"""

from __future__ import annotations

import ast
import math
import operator

from hybridrl.rollout.tools.function_tool import function_tool

MAX_EXPRESSION_CHARS = 500
MAX_RESULT_BITS = 4096  # ~1233 decimal digits
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


@function_tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the result.

    Supports + - * / // % ** and parentheses on integers and decimals. Use it for any computation
    instead of doing arithmetic in your head.

    Args:
        expression: An arithmetic expression, e.g. "(3+4)*5" or "1234*5678".
    """
    return format_number(evaluate(expression))


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression; ValueError names what is not allowed."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise ValueError(f"not an arithmetic expression: {error.msg}") from None
    return _value(tree.body)


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))  # type: ignore[operator]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        _check_size(result)
        return result
    raise ValueError(f"{ast.unparse(node)!r} is not allowed: only numbers, + - * / // % ** and parentheses")


def _check_power(base: int | float, exponent: int | float) -> None:
    magnitude = abs(base) if abs(base) > 1 else 2
    if abs(exponent) * math.log2(magnitude) > MAX_RESULT_BITS:
        raise ValueError(f"{base}**{exponent} is too large")


def _check_size(value: int | float) -> None:
    if isinstance(value, complex):
        raise ValueError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise ValueError("the result is too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("the result overflows")


def format_number(value: int | float) -> str:
    """Integers exactly; a float with an integral value as an integer ("6/3" -> "2"); others to 10 digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)
