"""Turn a resolved nested dict into the dataclass config, coercing each value to its schema type."""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from typing import Any

from hybridrl.config.index import union_members

_TYPE_NAMES = {int: "int", float: "float", bool: "bool", str: "string", list: "list", dict: "dict", type(None): "null"}


_INT = re.compile(r"[+-]?\d[\d_]*")
_FLOAT = re.compile(r"[+-]?(\d[\d_]*\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)


def parse_scalar(text: str) -> Any:
    """A number written as text (YAML 1.1 reads `1e-6` and `1e3` as strings); other text unchanged."""
    stripped = text.strip()
    if _INT.fullmatch(stripped):
        return int(stripped.replace("_", ""))
    if _FLOAT.fullmatch(stripped):
        return float(stripped.replace("_", ""))
    return text


class CoercionError(ValueError):
    """A value that does not fit its schema type; the caller adds the key name."""


def type_name(hint: Any) -> str:
    """`int | None` -> 'int or null', `list[int]` -> 'list of int'."""
    names = []
    for arm in union_members(hint):
        origin = typing.get_origin(arm) or arm
        args = typing.get_args(arm)
        name = _TYPE_NAMES.get(origin, getattr(origin, "__name__", str(origin)))
        names.append(f"list of {_TYPE_NAMES.get(args[0], args[0])}" if origin is list and args else name)
    return " or ".join(names)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise CoercionError


def _to_int(value: Any) -> int:
    if isinstance(value, str):
        value = parse_scalar(value)  # YAML 1.1 leaves '1e3' a string
    if isinstance(value, bool):
        raise CoercionError
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise CoercionError


def _to_float(value: Any) -> float:
    if isinstance(value, str):
        value = parse_scalar(value)  # YAML 1.1 leaves '1e-6' a string
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise CoercionError


def _to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # Hydra reads `experiment_name=123` as an int; the schema wants text
    raise CoercionError


def _to_list(value: Any, hint: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise CoercionError
    (item_hint,) = typing.get_args(hint) or (Any,)
    return [coerce(item, item_hint) for item in value]


def _to_dict(value: Any) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise CoercionError
    return dict(value)


_SCALARS = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str, dict: _to_dict}


def coerce(value: Any, hint: Any) -> Any:
    """`value` converted to `hint` (a scalar type, list[...], dict, Any or a union); CoercionError if it cannot be."""
    if hint is Any:
        return value
    arms = union_members(hint)
    if value is None:
        if type(None) in arms:
            return None
        raise CoercionError
    if isinstance(value, str) and "_" in value and str in arms:
        return value  # text such as verl's "0.5_2.0" bounds stays text where the key takes text (not 0.52)
    for arm in arms:
        origin = typing.get_origin(arm) or arm
        try:
            if origin is list:
                return _to_list(value, arm)
            if origin in _SCALARS:
                return _SCALARS[origin](value)
        except CoercionError:
            continue
    raise CoercionError


@functools.lru_cache(maxsize=None)
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # evaluates every annotation string: cached per schema class


def build_section(cls: type, tree: dict[str, Any], prefix: str, errors: list[str]) -> Any:
    """An instance of dataclass `cls` from `tree`; each bad value adds one message to `errors`."""
    hints = _type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        path, hint, value = f"{prefix}{f.name}", hints[f.name], tree.get(f.name)
        if dataclasses.is_dataclass(hint):
            kwargs[f.name] = build_section(hint, value if isinstance(value, dict) else {}, path + ".", errors)
            continue
        if f.name not in tree:
            continue
        try:
            kwargs[f.name] = coerce(value, hint)
        except CoercionError:
            errors.append(f"{path}={value!r} has the wrong type: expected {type_name(hint)}")
    return cls(**kwargs)
