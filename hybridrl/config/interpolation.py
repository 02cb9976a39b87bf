"""Resolve OmegaConf-style `${...}` references in a nested dict (absolute, `${.relative}`, oc.select, oc.env)."""

from __future__ import annotations

import os
from typing import Any

from hybridrl.config.errors import ConfigError
from hybridrl.config.index import get_in
from hybridrl.config.values import parse_scalar


def has_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every top-level `${...}` in text; nested braces belong to their parent."""
    spans, pos = [], 0
    while (start := text.find("${", pos)) >= 0:
        depth, end = 0, start
        while end < len(text):
            if text.startswith("${", end):
                depth += 1
                end += 1
            elif text[end] == "}":
                depth -= 1
                if depth == 0:
                    break
            end += 1
        if depth:
            raise ValueError(f"unclosed '${{' in {text!r}")
        spans.append((start, end + 1))
        pos = end + 1
    return spans


class _Resolver:
    def __init__(self, tree: dict[str, Any]) -> None:
        self.tree = tree
        self.done: dict[str, Any] = {}
        self.active: list[str] = []

    def value_at(self, path: str) -> Any:
        """The resolved value of a key (resolving what it refers to first)."""
        if path in self.done:
            return self.done[path]
        if path in self.active:
            cycle = " -> ".join(self.active[self.active.index(path) :] + [path])
            raise ConfigError(f"circular ${{...}} reference: {cycle}")
        raw = get_in(self.tree, path)
        self.active.append(path)
        try:
            value = self.resolve_value(raw, path)
        finally:
            self.active.pop()
        self.done[path] = value
        return value

    def resolve_value(self, raw: Any, path: str) -> Any:
        if isinstance(raw, dict):
            return {k: self.value_at(f"{path}.{k}") for k in raw}
        if isinstance(raw, list):
            return [self.resolve_value(item, path) for item in raw]
        if not has_interpolation(raw):
            return raw
        try:
            spans = _spans(raw)
        except ValueError as exc:
            raise ConfigError(f"key '{path}': {exc}") from None
        if len(spans) == 1 and spans[0] == (0, len(raw)):
            return self.expression(raw[2:-1], path)  # a whole-value reference keeps the referenced type
        pieces, pos = [], 0
        for start, end in spans:
            pieces += [raw[pos:start], str(self.expression(raw[start + 2 : end - 1], path))]
            pos = end
        return "".join(pieces + [raw[pos:]])

    def expression(self, expr: str, path: str) -> Any:
        name, has_resolver, args = expr.partition(":")
        if not has_resolver:
            return self.reference(expr.strip(), path, required=True)
        target, has_default, default = args.partition(",")
        if name == "oc.select":
            found = self.reference(target.strip(), path, required=False)
            return found if found is not _MISSING else self.resolve_value(parse_scalar(default), path)
        if name == "oc.env":
            if target.strip() in os.environ:
                return os.environ[target.strip()]
            if not has_default:
                raise ConfigError(f"key '{path}': environment variable {target.strip()} is not set and has no default")
            return self.resolve_value(parse_scalar(default), path)
        raise ConfigError(f"key '{path}': unsupported resolver '{name}' in ${{{expr}}}; use oc.select or oc.env")

    def reference(self, target: str, path: str, required: bool) -> Any:
        absolute = _absolute(target, path)
        try:
            get_in(self.tree, absolute)
        except KeyError:
            if not required:
                return _MISSING
            raise ConfigError(f"key '{path}' refers to missing key '{absolute}' in ${{{target}}}") from None
        return self.value_at(absolute)


_MISSING = object()


def _absolute(target: str, path: str) -> str:
    """`.x` is a sibling of the key at `path`, `..x` a sibling of its parent; anything else is absolute."""
    if not target.startswith("."):
        return target
    dots = len(target) - len(target.lstrip("."))
    parents = path.split(".")[:-dots]
    return ".".join(parents + [target[dots:]])


def resolve_tree(tree: dict[str, Any]) -> dict[str, Any]:
    """A copy of `tree` with every `${...}` replaced by the value it names."""
    resolver = _Resolver(tree)
    return {key: resolver.value_at(key) for key in tree}
