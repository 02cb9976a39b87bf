"""What tools may return, checked: anything else is a tool error the model is told about (`invalid_return`).

Function tools (verl's `normalize_function_tool_return`, stricter): a str; a ToolResponse; a dict or list
(sent as JSON); a number or bool (sent as text); or a tuple (response,), (response, reward) or
(response, reward, metrics). `BaseTool.execute` returns (ToolResponse or str, reward, metrics).
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, field
from typing import Any


class InvalidToolReturn(ValueError):
    """A tool returned something the loop cannot show the model; the message says what and what is expected."""


@dataclass
class ToolOutcome:
    text: str
    reward: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def from_function_return(value: Any) -> ToolOutcome:
    if isinstance(value, tuple):
        if not 1 <= len(value) <= 3:
            raise InvalidToolReturn(f"returned a tuple of {len(value)} items; return (response,), (response, reward) "
                                    f"or (response, reward, metrics)")
        return ToolOutcome(response_text(value[0]), _reward(value[1] if len(value) > 1 else None),
                           _metrics(value[2] if len(value) > 2 else None))
    return ToolOutcome(response_text(value), None, {})


def from_execute_return(value: Any) -> ToolOutcome:
    if not isinstance(value, tuple) or len(value) != 3:
        raise InvalidToolReturn(f"execute returned {_describe(value)}; it must return (ToolResponse, reward, metrics)")
    response, reward, metrics = value
    return ToolOutcome(response_text(response), _reward(reward), _metrics(metrics))


def response_text(value: Any) -> str:
    """The text of a tool's response (a ToolResponse-like object with `.text`, a str, JSON data, a number)."""
    if isinstance(value, str):
        return value
    if hasattr(value, "text") and hasattr(value, "image"):  # hybridrl's or verl's ToolResponse
        if getattr(value, "image", None) or getattr(value, "video", None):
            raise InvalidToolReturn("returned an image or video; multimodal tool output is not supported (text only)")
        text = value.text
        if text is not None and not isinstance(text, str):
            raise InvalidToolReturn(f"returned ToolResponse(text={_describe(text)}); text must be a str")
        return text or ""
    if isinstance(value, (bool, numbers.Number)):
        return str(value)
    if isinstance(value, (dict, list)):
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError) as error:
            raise InvalidToolReturn(f"returned a {type(value).__name__} that is not JSON ({error})") from None
    raise InvalidToolReturn(f"returned {_describe(value)}; return a str, a ToolResponse, JSON data (dict/list) or "
                            f"a number")


def _reward(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise InvalidToolReturn(f"returned reward {_describe(value)}; a tool reward is a finite number or None")
    return float(value)


def _metrics(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidToolReturn(f"returned metrics {_describe(value)}; tool metrics are a dict or None")
    return dict(value)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80] + '...' if len(text) > 80 else text}"
