"""Hydra-style overrides (`a.b=1`, `+a.b=1`, `++a.b=1`, `~a.b`) and YAML files, applied to a nested-dict tree.

`+` adds a key under an open dict (or a key verl's YAML lacks, which verl scripts add with `+`);
`++` adds or overrides; `~` deletes a key of an open dict and resets a schema key to its default.
Plain `a.b=1` also adds a new key under an open dict (Hydra would ask for `+`; nothing is lost by allowing it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hybridrl.config.compat import canonical_path, is_prefix_alias
from hybridrl.config.errors import ConfigError
from hybridrl.config.index import KeySpec, default_tree, get_in, open_root, schema_index, set_in, unknown_key_message
from hybridrl.config.values import parse_value

SET, ADD, FORCE, DELETE = "set", "add", "force", "delete"
IGNORED_YAML_KEYS = ("_target_",)  # names of verl's own config classes; hybridrl's schema replaces them


@dataclass(frozen=True)
class Override:
    """One command-line override."""

    op: str
    path: str
    value: Any = None


def parse_override(text: str) -> Override:
    """`+a.b=[1,2]` -> Override('add', 'a.b', [1, 2])."""
    op, body = SET, text.strip()
    for prefix, name in (("++", FORCE), ("+", ADD), ("~", DELETE)):
        if body.startswith(prefix):
            op, body = name, body[len(prefix) :]
            break
    key, has_value, raw = body.partition("=")
    key = key.strip()
    if not key:
        raise ConfigError(f"override {text!r} names no key: write key=value, +key=value, ++key=value or ~key")
    if op == DELETE:
        if has_value:
            raise ConfigError(f"override {text!r}: write ~{key} without a value to delete or reset it")
        return Override(op, key)
    if not has_value:
        raise ConfigError(f"override {text!r} has no '=': write {key}=VALUE (or ~{key} to delete it)")
    return Override(op, key, parse_value(raw, key))


class TreeEditor:
    """Applies overrides and YAML mappings to a copy of the default tree, recording which keys the user set."""

    def __init__(self) -> None:
        self.tree = default_tree()
        self.explicit: set[str] = set()
        self.errors: list[str] = []
        self._spelling: dict[str, tuple[str, Any]] = {}  # canonical key -> (spelling, value) in the current source

    def start_source(self) -> None:
        """Older and HEAD spellings of one key may disagree only across sources (file, then command line)."""
        self._spelling = {}

    def apply(self, override: Override) -> None:
        path = self._canonical(override.path, override.value, override.op)
        if path is None:
            return
        spec = schema_index().get(path)
        if spec is None and open_root(path) is None:
            self.errors.append(unknown_key_message(override.path))
        elif override.op == DELETE:
            self._delete(path, spec)
        elif override.op == ADD and spec is not None and not spec.plus:
            self.errors.append(f"cannot add '{override.path}': key exists, use {override.path}=... or ++{override.path}=...")
        else:
            self._assign(path, override.value, spec, merge=False)

    def apply_mapping(self, mapping: dict[str, Any], prefix: str = "") -> None:
        """Merge a (partial) nested mapping from a YAML file; groups and open dicts merge key by key."""
        for key, value in mapping.items():
            if key in IGNORED_YAML_KEYS:
                continue
            dotted = f"{prefix}{key}"
            if isinstance(value, dict) and is_prefix_alias(dotted):
                self.apply_mapping(value, dotted + ".")  # each old key moves to its own new place
                continue
            path = self._canonical(dotted, value, SET)
            if path is None:
                continue
            spec = schema_index().get(path)
            if spec is None and open_root(path) is None:
                self.errors.append(unknown_key_message(dotted))
                continue
            self._assign(path, value, spec, merge=True)

    def _canonical(self, path: str, value: Any, op: str) -> str | None:
        """The HEAD key for `path`, or None when an older spelling is set to null (verl's "unset")."""
        canonical = canonical_path(path)
        if canonical == path:
            self._remember(path, path, value)
            return path
        if value is None and op != DELETE and canonical in schema_index():
            return None
        self._remember(canonical, path, value)
        return canonical

    def _remember(self, canonical: str, spelling: str, value: Any) -> None:
        previous = self._spelling.get(canonical)
        if previous is not None and previous[0] != spelling and previous[1] != value:
            self.errors.append(
                f"{previous[0]}={previous[1]!r} and {spelling}={value!r} are two spellings of one key; set only one"
            )
        self._spelling[canonical] = (spelling, value)

    def _assign(self, path: str, value: Any, spec: KeySpec | None, merge: bool) -> None:
        if spec is not None and spec.section is not None:
            self._assign_section(path, value)
        elif merge and isinstance(value, dict) and spec is not None and spec.is_open:
            for key, item in value.items():
                self._assign(f"{path}.{key}", item, None, merge=True)
        elif merge and isinstance(value, dict) and spec is None and isinstance(self._current(path), dict):
            for key, item in value.items():
                self._assign(f"{path}.{key}", item, None, merge=True)
        else:
            set_in(self.tree, path, copy.deepcopy(value))
            self.explicit.add(path)

    def _assign_section(self, path: str, value: Any) -> None:
        if value is None:
            self._delete(path, schema_index()[path])  # `filter_groups: null` (verl's default) = the defaults
        elif isinstance(value, dict):
            self.apply_mapping(value, path + ".")
        else:
            self.errors.append(
                f"{path}={value!r}: {path} is a group of keys; set its keys ({path}.KEY=VALUE) or give a mapping"
            )

    def _current(self, path: str) -> Any:
        try:
            return get_in(self.tree, path)
        except KeyError:
            return None

    def _delete(self, path: str, spec: KeySpec | None) -> None:
        if spec is not None:  # a schema key goes back to its default (a `${...}` default follows again)
            set_in(self.tree, path, get_in(default_tree(), path))
        else:
            parent, _, leaf = path.rpartition(".")
            node = self._current(parent)
            if not isinstance(node, dict) or leaf not in node:
                self.errors.append(f"cannot delete '{path}': it is not set")
                return
            del node[leaf]
        self.explicit = {key for key in self.explicit if key != path and not key.startswith(path + ".")}
