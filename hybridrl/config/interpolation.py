"""Resolve `${...}` references in a nested dict with OmegaConf, the library verl's configs are written for.

Every OmegaConf reference works: absolute `${a.b}`, relative `${.sibling}` / `${..parent_sibling}`, and the
resolvers verl's YAMLs use (`oc.select`, `oc.env`, `oc.create`, `oc.decode`, `oc.dict.*`), plus Hydra's
`${now:%Y-%m-%d}` (the start time, one value per process as under Hydra). Errors name the key that holds
the reference and what it refers to.
"""

from __future__ import annotations

import copy
import datetime
import re
from typing import Any

from hybridrl.config.errors import ConfigError

MANDATORY = "???"  # OmegaConf's "no value yet": verl marks keys a script must set this way


def _register_resolvers() -> None:
    """Hydra registers `now` when it starts an app; hybridrl composes without starting one."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("now"):
        OmegaConf.register_new_resolver(
            "now", lambda pattern: datetime.datetime.now().strftime(pattern), use_cache=True
        )


def has_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def resolve_tree(tree: dict[str, Any]) -> dict[str, Any]:
    """A copy of `tree` with every `${...}` replaced by the value it names; `???` leaves stay `???`.

    OmegaConf wraps every value of a tree in a node (about 0.2 s for hybridrl's 700 keys), so it resolves a
    pruned copy: the values holding a `${...}` and every key their text names. The result is OmegaConf's,
    since each reference still finds what it names (a name not kept does not exist in the tree either).
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    _register_resolvers()
    holders = _holders(tree)
    resolved = copy.deepcopy(tree)
    if not holders:
        return resolved
    pruned: dict[str, Any] = {}
    for path in [*holders, *_named_paths(tree, holders)]:
        _copy_path(tree, pruned, path)
    try:
        values = OmegaConf.to_container(OmegaConf.create(pruned), resolve=True, throw_on_missing=False)
    except OmegaConfBaseException as exc:
        raise ConfigError(_message(exc, holders)) from None
    for path in holders:
        _put(resolved, path, _get(values, path))
    return resolved


_NAME = re.compile(r"(?<![\w.])(\.*[A-Za-z_][\w-]*(?:\.[\w-]+)*)")


def _holders(node: Any, path: tuple = ()) -> dict[tuple, str]:
    """Path (a tuple of keys) -> text of every value holding a `${...}`; a list is held whole."""
    if isinstance(node, dict):
        found: dict[tuple, str] = {}
        for key, value in node.items():
            found.update(_holders(value, (*path, key)))
        return found
    if isinstance(node, list):
        texts = [text for item in node for text in _holders(item).values()] + [
            item for item in node if has_interpolation(item)]
        return {path: " ".join(texts)} if texts else {}
    return {path: node} if has_interpolation(node) else {}


def _named_paths(tree: dict[str, Any], holders: dict[tuple, str]) -> list[tuple]:
    """Every existing key a holder's text names, absolute or relative (`.x` is a sibling, `..x` one up)."""
    named = []
    for path, text in holders.items():
        for name in _NAME.findall(text):
            dots = len(name) - len(name.lstrip("."))
            parts = tuple(name.lstrip(".").split("."))
            target = (*path[: len(path) - dots], *parts) if dots else parts
            if _exists(tree, target):
                named.append(target)
    return named


def _exists(tree: Any, path: tuple) -> bool:
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _get(tree: Any, path: tuple) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def _put(tree: dict[str, Any], path: tuple, value: Any) -> None:
    node = tree
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _copy_path(source: dict[str, Any], target: dict[str, Any], path: tuple) -> None:
    node, out = source, target
    for key in path[:-1]:
        node = node[key]
        out = out.setdefault(key, {})
        if not isinstance(out, dict):
            return  # a whole parent is already kept
    out[path[-1]] = copy.deepcopy(node[path[-1]])


def _holder_of(exc: Exception, holders: dict[tuple, str]) -> str | None:
    """The key whose own text holds what failed: OmegaConf reports the first key whose resolution reached it
    (often one that only refers to the culprit)."""
    message = str(exc).splitlines()[0] if str(exc) else ""
    names = re.findall(r"'([^']+)'", message) + [f"${{{m}:" for m in re.findall(r"interpolation type (\w+)", message)]
    for name in names:
        for path, text in holders.items():
            if name in text:
                return ".".join(map(str, path))
    return None


def _cycle(holders: dict[tuple, str]) -> list[str]:
    """A cycle of keys referring to each other (absolute references), as dotted names; [] when none is found."""
    names = {".".join(map(str, path)): text for path, text in holders.items()}
    edges = {name: [ref for ref in _NAME.findall(text) if ref in names] for name, text in names.items()}
    for start in edges:
        trail, node = [start], start
        while edges.get(node):
            node = edges[node][0]
            if node in trail:
                return trail[trail.index(node):] + [node]
            trail.append(node)
    return []


def _message(exc: Exception, holders: dict[tuple, str]) -> str:
    from omegaconf.errors import (
        GrammarParseError,
        InterpolationKeyError,
        InterpolationResolutionError,
        UnsupportedInterpolationType,
    )

    key = _holder_of(exc, holders) or getattr(exc, "full_key", None) or "?"
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, InterpolationKeyError):
        return f"key '{key}': {first_line} (a ${{...}} reference names a key that does not exist; fix the path)"
    if isinstance(exc, UnsupportedInterpolationType):
        return (f"key '{key}': {first_line}; the resolvers are oc.select, oc.env, oc.create, oc.decode, "
                "oc.dict.keys/values and now")
    if isinstance(exc, GrammarParseError):
        return f"key '{key}': cannot parse its ${{...}} reference ({first_line}); check the braces and quotes"
    if isinstance(exc, InterpolationResolutionError) and "Recursive" in first_line:
        cycle = _cycle(holders)
        where = " -> ".join(cycle) if cycle else f"through '{key}'"
        return f"circular ${{...}} reference: {where}; one of these keys must hold a value"
    if isinstance(exc, InterpolationResolutionError) and "Environment variable" in first_line:
        return f"key '{key}': {first_line}; set it or give a default: ${{oc.env:NAME,default}}"
    return f"key '{key}': {first_line}"
