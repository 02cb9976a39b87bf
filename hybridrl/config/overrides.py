"""Command-line overrides in Hydra's grammar, applied to a nested-dict tree with hybridrl's key checks.

Hydra's own parser reads the text (`a.b=1`, `+a.b=1`, `++a.b=1`, `~a.b`, lists, dicts, quoted strings,
`${...}`), so every command line verl accepts parses the same way. Applying the overrides stays here rather
than in Hydra's struct-mode merge because hybridrl checks more than Hydra can: unknown keys get a
did-you-mean over the whole schema, each older or newer verl spelling moves onto its internal key, and the
keys a source sets are recorded for the two-spellings rule (`agreement.py`).

`+` adds a key under an open dict; on a key that exists it sets it (Hydra would refuse, but which keys exist
differs between verl versions, and scripts add with `+` what their version lacked); `++` adds or overrides;
`~` deletes a key of an open dict and resets a schema key to its default.
A plain `a.b=1` also adds a new key under an open dict (Hydra would ask for `+`; nothing is lost by allowing it).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hybridrl.config.errors import ConfigError
from hybridrl.config.index import (
    KeySpec,
    default_tree,
    default_tree_view,
    get_in,
    open_root,
    schema_index,
    set_in,
    type_arms,
    unknown_key_message,
)
from hybridrl.config.interpolation import MANDATORY
from hybridrl.config.legacy import is_legacy_key
from hybridrl.config.megatron_only import is_megatron_only
from hybridrl.config.spellings import canonical_path, is_alias_prefix, null_means_unset

SET, ADD, FORCE, DELETE = "set", "add", "force", "delete"
FILE, CLI = "file", "cli"
IGNORED_YAML_KEYS = ("_target_",)  # names of verl's own config classes; hybridrl's schema replaces them
_OPS = {"CHANGE": SET, "ADD": ADD, "FORCE_ADD": FORCE, "DEL": DELETE}  # Hydra's OverrideType names

if TYPE_CHECKING:  # Hydra is imported when a command line is parsed, not with the config package
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Override as HydraOverride


@dataclass(frozen=True)
class Override:
    """One command-line override of a key (`value` is None for a delete without a value)."""

    op: str
    path: str
    value: Any = None
    text: str = ""
    has_value: bool = True


@dataclass(frozen=True)
class ParsedArgs:
    """Overrides split the way Hydra splits them: config-group choices (`model_engine=megatron`,
    `actor@actor_rollout_ref.actor=megatron_actor`) compose files; the rest edit keys."""

    keys: list[Override]
    groups: list[str]


def parse_override(text: str) -> Override:
    """`+a.b=[1,2]` -> Override('add', 'a.b', [1, 2])."""
    parsed = _hydra_parse(text)
    if parsed.package is not None:
        raise ConfigError(f"override {text!r} selects a config group ({parsed.key_or_group}@{parsed.package}); "
                          "pass it on the command line, where it composes the config files")
    return _from_hydra(parsed, text)


def parse_overrides(texts: list[str], group_names: frozenset[str] = frozenset()) -> ParsedArgs:
    """Parse every override; those naming a config group (no dot, a group name, `@` or `/`) compose files."""
    keys, groups = [], []
    for text in texts:
        parsed = _hydra_parse(text)
        name = parsed.key_or_group
        if parsed.package is not None or "/" in name or ("." not in name and name in group_names):
            groups.append(text)
        else:
            keys.append(_from_hydra(parsed, text))
    return ParsedArgs(keys, groups)


@functools.lru_cache(maxsize=1)
def _parser() -> OverridesParser:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _hydra_parse(text: str) -> HydraOverride:
    from hydra.errors import HydraException

    try:
        parsed = _parser().parse_override(text)
    except HydraException as exc:
        reason = str(exc).splitlines()[0]
        raise ConfigError(
            f"cannot parse the override {text!r}: {reason}. Write key=value, +key=value, ++key=value or ~key; "
            "quote a value holding spaces, '=', '~', '#' or quotes: key='...'"
        ) from None
    if parsed.is_sweep_override():
        key = parsed.key_or_group
        items = text.partition("=")[2]
        raise ConfigError(
            f"ambiguous value for '{key}' ({items!r}): a comma-separated value is a Hydra sweep; write a list as "
            f"{key}='[{items}]' or quote a string as {key}='\"{items}\"'"
        )
    return parsed


def _from_hydra(parsed: HydraOverride, text: str) -> Override:
    op = _OPS[parsed.type.name]
    has_value = not (op == DELETE and parsed._value is None)
    return Override(op, parsed.key_or_group, parsed.value() if has_value else None, text, has_value)


def _underscored_text(override: Override, spec: KeySpec | None) -> Any:
    """The value, except that a number written with `_` stays the text written where the key takes text: Hydra
    reads `2_5` as 25 and `0.5_5` as 0.55 (Python's digit separators), where verl's `lower_upper` thresholds
    (`rollout_is_threshold=0.5_5`) mean the two bounds 0.5 and 5."""
    value, raw = override.value, override.text.partition("=")[2].strip()
    if (spec is not None and str in type_arms(spec.hint) and isinstance(value, int | float)
            and not isinstance(value, bool) and "_" in raw):
        return raw
    return value


def _without_targets(value: Any) -> Any:
    """A deep copy without verl's `_target_` entries (and `???`, verl's "not set") inside dicts and lists."""
    if isinstance(value, dict):
        return {k: _without_targets(v) for k, v in value.items() if k not in IGNORED_YAML_KEYS and v != MANDATORY}
    if isinstance(value, list):
        return [_without_targets(v) for v in value]
    return copy.deepcopy(value)


class TreeEditor:
    """Applies YAML mappings and overrides to a copy of the default tree, recording which keys each source set.

    `explicit` maps each key a source set to that source (FILE or CLI); for a file (often a whole dumped
    config) only values that differ from hybridrl's default count as set.
    """

    def __init__(self) -> None:
        self.tree = default_tree()
        self.explicit: dict[str, str] = {}
        self.errors: list[str] = []
        self.megatron_only: list[str] = []  # keys set that only verl's Megatron engine reads (megatron_only.py)
        self._source = FILE
        self._spelling: dict[str, tuple[str, Any]] = {}  # internal key -> (spelling, value) in this source

    def start_source(self, source: str) -> None:
        """Older and newer spellings of one key may disagree only across sources (file, then command line)."""
        self._source, self._spelling = source, {}

    def apply(self, override: Override) -> None:
        path = self._canonical(override.path, override.value, override.op)
        if path is None:
            return
        spec = schema_index().get(path)
        if not self._known(path, spec):
            self.errors.append(unknown_key_message(override.path))
        elif override.op == DELETE:
            self._delete(path, spec, override)
        else:  # `+` on a key that exists sets it: the verl version a script was written for may lack the key
            self._assign(path, _underscored_text(override, spec), spec, merge=False)

    def apply_mapping(self, mapping: dict[str, Any], prefix: str = "") -> None:
        """Merge a (partial) nested mapping from a YAML file; groups and open dicts merge key by key."""
        for key, value in mapping.items():
            if key in IGNORED_YAML_KEYS:
                continue
            dotted = f"{prefix}{key}"
            if isinstance(value, dict) and dotted not in schema_index() and is_alias_prefix(dotted):
                self.apply_mapping(value, dotted + ".")  # each key of an other-layout group moves on its own
                continue
            path = self._canonical(dotted, value, SET)
            if path is None:
                continue
            spec = schema_index().get(path)
            if not self._known(path, spec):
                self.errors.append(unknown_key_message(dotted))
                continue
            self._assign(path, value, spec, merge=True)

    def _known(self, path: str, spec: KeySpec | None) -> bool:
        if spec is not None or open_root(path) is not None or is_legacy_key(path):
            return True
        if is_megatron_only(path):
            self.megatron_only.append(path)
            return True
        return False

    def _canonical(self, path: str, value: Any, op: str) -> str | None:
        """The internal key for `path`, or None when the value means "not set" there (`???`, or a null for
        another spelling, which verl also reads as unset)."""
        if value == MANDATORY and op != DELETE:
            return None  # verl's "a script must set this": hybridrl has a default
        canonical = canonical_path(path)
        if value is None and op != DELETE and canonical in schema_index():
            if canonical != path or null_means_unset(canonical):
                return None
        if canonical != path or path in schema_index():
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
        elif isinstance(value, dict) and self._merges_into(path, spec, merge):
            for key, item in value.items():
                if key not in IGNORED_YAML_KEYS:
                    self._assign(f"{path}.{key}", item, None, merge=True)
        else:
            self._set_leaf(path, value)

    def _merges_into(self, path: str, spec: KeySpec | None, merge: bool) -> bool:
        if not merge:
            return False
        return (spec is not None and spec.is_open) or (spec is None and isinstance(self._current(path), dict))

    def _set_leaf(self, path: str, value: Any) -> None:
        if value == MANDATORY:
            return  # `???` under an open dict (verl's reward_model.rollout.name): not set
        value = _without_targets(value)
        if self._source == CLI or value != self._default(path):
            self.explicit[path] = self._source
        set_in(self.tree, path, value)

    def _assign_section(self, path: str, value: Any) -> None:
        if value is None:
            self._reset(path)  # `filter_groups: null` (verl's default) = the defaults
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

    @staticmethod
    def _default(path: str) -> Any:
        try:
            return copy.deepcopy(get_in(default_tree_view(), path))
        except KeyError:
            return None

    def _reset(self, path: str) -> None:
        set_in(self.tree, path, self._default(path))
        self._reset_explicit(path)

    def _delete(self, path: str, spec: KeySpec | None, override: Override) -> None:
        current = self._current(path)
        if override.has_value and current != override.value:
            self.errors.append(f"cannot delete '{override.path}={override.value!r}': its value is {current!r}")
        elif spec is not None:  # a schema key goes back to its default (a `${...}` default follows again)
            self._reset(path)
        else:
            parent, _, leaf = path.rpartition(".")
            node = self._current(parent) if parent else self.tree
            if not isinstance(node, dict) or leaf not in node:
                self.errors.append(f"cannot delete '{path}': it is not set")
                return
            del node[leaf]
            self._reset_explicit(path)

    def _reset_explicit(self, path: str) -> None:
        self.explicit = {key: src for key, src in self.explicit.items() if key != path and not key.startswith(path + ".")}
