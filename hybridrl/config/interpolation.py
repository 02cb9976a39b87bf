"""Resolve `${...}` references in a nested dict with OmegaConf, the library verl's configs are written for.

Every OmegaConf reference works: absolute `${a.b}`, relative `${.sibling}` / `${..parent_sibling}`, and the
resolvers verl's YAMLs use (`oc.select`, `oc.env`, `oc.create`, `oc.decode`, `oc.dict.*`), plus Hydra's
`${now:%Y-%m-%d}` (the start time, one value per process as under Hydra). Errors name the key that holds
the reference and what it refers to.
"""

from __future__ import annotations

import copy
import datetime
import functools
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

    OmegaConf wraps every value of a tree in a node and parses every `${...}` with its grammar (about 0.2 s for
    hybridrl's tree), so it resolves less: a `${...}` that is still its schema default and names only keys that
    still hold their defaults takes its value from the default tree, resolved once; the rest go to OmegaConf
    in a pruned copy (those values and every key their text names, transitively). The result is OmegaConf's.
    """
    _register_resolvers()
    holders = _holders(tree)
    resolved = copy.deepcopy(tree)
    unchanged = _unchanged(tree, holders)
    defaults = _default_values()
    for path in unchanged:
        _put(resolved, path, copy.deepcopy(defaults[path]))
    live = {path: text for path, text in holders.items() if path not in unchanged}
    if live:
        values = _omegaconf_resolve(tree, holders, live)
        for path in live:
            _put(resolved, path, _get(values, path))
    return resolved


def _omegaconf_resolve(tree: dict[str, Any], holders: dict[tuple, str], live: dict[tuple, str]) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    needed, queue = dict(live), list(live)
    while queue:  # the holders the live ones reach through the keys they name
        for target in _targets(queue.pop(), needed):
            for path in holders:
                if path[: len(target)] == target and path not in needed:
                    needed[path] = holders[path]
                    queue.append(path)
    pruned: dict[str, Any] = {}
    for path in [*needed, *_named_paths(tree, needed)]:
        _copy_path(tree, pruned, path)
    try:
        values = OmegaConf.to_container(OmegaConf.create(pruned), resolve=True, throw_on_missing=False)
    except OmegaConfBaseException as exc:
        raise ConfigError(_message(exc, holders)) from None
    assert isinstance(values, dict)
    return values


_VOLATILE = ("oc.env", "now:")  # values that depend on more than the tree
_ABSENT = object()


@functools.lru_cache(maxsize=1)
def _default_values() -> dict[tuple, Any]:
    """Each `${...}` of the default tree, resolved (once per process)."""
    from hybridrl.config.index import default_tree_view

    tree = default_tree_view()
    holders = _default_holders()
    values = _omegaconf_resolve(tree, holders, holders)
    return {path: _get(values, path) for path in holders}


@functools.lru_cache(maxsize=1)
def _default_holders() -> dict[tuple, str]:
    from hybridrl.config.index import default_tree_view

    return _holders(default_tree_view())


def _unchanged(tree: dict[str, Any], holders: dict[tuple, str]) -> set[tuple]:
    """Holders whose text is the schema default's and whose named keys hold the defaults (so their value is)."""
    from hybridrl.config.index import default_tree_view

    default_holders, base = _default_holders(), default_tree_view()
    memo: dict[tuple, bool] = {}

    def same(path: tuple) -> bool:
        if path in memo:
            return memo[path]
        memo[path] = False  # a cycle counts as changed (OmegaConf then reports it)
        text = holders[path]
        ok = default_holders.get(path) == text and not any(v in text for v in _VOLATILE)
        for target in _targets(path, {path: text}) if ok else []:
            ok = _lookup(tree, target) == _lookup(base, target) and all(
                same(h) for h in holders if h[: len(target)] == target)
            if not ok:
                break
        memo[path] = ok
        return ok

    return {path for path in holders if same(path)}


def _targets(path: tuple, holders: dict[tuple, str]) -> list[tuple]:
    """The keys a holder's text names (absolute, or relative: `.x` a sibling, `..x` one up), existing or not."""
    text = holders[path]
    found = []
    for name in _NAME.findall(text):
        dots = len(name) - len(name.lstrip("."))
        parts = tuple(name.lstrip(".").split("."))
        found.append((*path[: len(path) - dots], *parts) if dots else parts)
    return found


def _lookup(tree: Any, path: tuple) -> Any:
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


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
    """Every existing key the holders' texts name."""
    return [target for path in holders for target in _targets(path, holders) if _lookup(tree, target) is not _ABSENT]


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
