"""A flat index of the schema (dotted path -> key spec), the default tree and did-you-mean suggestions."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any

from hybridrl.config.schema import HybridRLConfig


@dataclass(frozen=True)
class KeySpec:
    """One schema key: where it lives, its type, doc line and loader hints."""

    path: str
    hint: Any
    doc: str
    ref: str | None
    choices: tuple[Any, ...] | None
    plus: bool
    section: type | None  # the dataclass type when the key is a group of keys

    @property
    def is_open(self) -> bool:
        """Open dicts accept any sub-key (added with `+key=...`)."""
        return dict in type_arms(self.hint)


def union_members(hint: Any) -> tuple[Any, ...]:
    """The alternatives of a union (`list[int] | None` -> (list[int], NoneType)); a plain type is its own."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def type_arms(hint: Any) -> tuple[Any, ...]:
    """The runtime classes of a type's alternatives (`list[int] | None` -> (list, NoneType))."""
    return tuple(typing.get_origin(arm) or arm for arm in union_members(hint))


def _walk(cls: type, prefix: str, out: dict[str, KeySpec]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        hint = hints[f.name]
        sub = hint if dataclasses.is_dataclass(hint) else None
        meta = f.metadata
        out[path] = KeySpec(path, hint, meta.get("doc", ""), meta.get("ref"), meta.get("choices"), meta.get("plus", False), sub)
        if sub is not None:
            _walk(sub, path + ".", out)


@functools.lru_cache(maxsize=1)
def schema_index() -> dict[str, KeySpec]:
    """Every key of the schema by dotted path, in declaration order (sections before their keys)."""
    out: dict[str, KeySpec] = {}
    _walk(HybridRLConfig, "", out)
    return out


def config_tree(cfg: Any) -> dict[str, Any]:
    """A config dataclass as plain nested dicts (lists and dicts copied)."""
    return {f.name: _tree_value(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}


def _tree_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return config_tree(value)
    return copy.deepcopy(value)


@functools.lru_cache(maxsize=1)
def _default_tree() -> dict[str, Any]:
    tree = config_tree(HybridRLConfig())
    for spec in schema_index().values():
        if spec.ref is not None:
            set_in(tree, spec.path, spec.ref)
    return tree


def default_tree() -> dict[str, Any]:
    """Default values as nested dicts, with `${...}` references in place of the keys that follow others."""
    return copy.deepcopy(_default_tree())


def default_tree_view() -> dict[str, Any]:
    """`default_tree()` without the copy, for reading only (shared: never modify it)."""
    return _default_tree()


def get_in(tree: dict[str, Any], path: str) -> Any:
    """The value at a dotted path; KeyError when any part is missing."""
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


def config_value(cfg: Any, path: str) -> Any:
    """The value at a dotted path of a config object (`HybridRLConfig` or one of its sections)."""
    node = cfg
    for part in path.split("."):
        node = getattr(node, part)
    return node


def set_in(tree: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path, creating (or replacing null with) intermediate dicts."""
    *parents, leaf = path.split(".")
    node = tree
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[leaf] = value


def open_root(path: str) -> KeySpec | None:
    """The open-dict key that contains `path` (strictly above it), if any."""
    index = schema_index()
    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        spec = index.get(".".join(parts[:end]))
        if spec is not None:
            return spec if spec.is_open else None
    return None


def suggest_keys(path: str, limit: int = 3) -> list[str]:
    """Closest valid dotted keys: the same leaf name elsewhere, else near spellings of the path or leaf."""
    known = list(schema_index())
    leaf = path.rsplit(".", 1)[-1]
    same_leaf = [key for key in known if key.rsplit(".", 1)[-1] == leaf]
    if same_leaf:
        return _rank(path, same_leaf)[:limit]
    close = difflib.get_close_matches(path, known, n=limit, cutoff=0.75)
    if not close:
        leaves = {key.rsplit(".", 1)[-1] for key in known}
        close_leaves = set(difflib.get_close_matches(leaf, leaves, n=2, cutoff=0.75))
        close = [key for key in known if key.rsplit(".", 1)[-1] in close_leaves]
    ranked = _rank(path, close)
    if not ranked:
        return []
    # Keep only the clear winners so a one-letter typo gets a single suggestion.
    best = _similarity(path, ranked[0])
    return [key for key in ranked if _similarity(path, key) >= best - 0.03][:limit]


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _rank(path: str, keys: list[str]) -> list[str]:
    return sorted(keys, key=lambda key: -_similarity(path, key))


# Keys that verl scripts set although verl's own config has no such key (its Hydra refuses them as "not in
# struct"): what to use instead.
NOT_VERL_KEYS = {
    "actor_rollout_ref.model.torch_dtype": (
        "verl's config has no such key either (verl's January-2026 CISPO example sets it, which verl's Hydra "
        "refuses as not in struct; the August tree dropped it): the actor computes in "
        "actor_rollout_ref.actor.fsdp_config.dtype (bfloat16 by default) over fp32 master weights "
        "(fsdp_config.model_dtype); remove the key"),
}


def unknown_key_message(path: str) -> str:
    """`unknown config key 'x'; did you mean 'y'?` (or a pointer to print-config when nothing is close)."""
    if path in NOT_VERL_KEYS:
        return f"unknown config key '{path}': {NOT_VERL_KEYS[path]}"
    suggestions = suggest_keys(path)
    if not suggestions:
        return f"unknown config key '{path}'; run `python -m hybridrl.config.cli --docs` to list every key"
    quoted = [f"'{s}'" for s in suggestions]
    choice = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"unknown config key '{path}'; did you mean {choice}?"
