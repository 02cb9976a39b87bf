"""Arithmetic and list literals evaluated without `eval`: verl's graders call `eval` on model text (to
turn `2*3.14159` or `[[1, 2], [3, 4]]` into values); this gives the same values for such text and
refuses anything else (names, calls, attributes), so model output never runs as code."""

from __future__ import annotations

import ast
import operator
from typing import Any

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_EXPONENT = 10_000  # 10**10**10 would not finish


def safe_eval(text: str) -> Any:
    """The value of `text` if it is numbers, + - * / // % **, parentheses, lists and tuples; ValueError otherwise."""
    return _value(ast.parse(text.strip(), mode="eval").body)


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex)) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_value(element) for element in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is too large to evaluate")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"{ast.dump(node)[:80]} is not arithmetic")
