"""verl's interaction YAML (`actor_rollout_ref.rollout.multi_turn.interaction_config_path`), read and checked
without importing any class, so `hybridrl print-config --validate` and `hybridrl train` report a broken file
before anything loads:

    interaction:
      - name: gsm8k                                   # optional: derived from the class name (verl's rule)
        class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction
        config: {}                                    # the class's constructor config (`name` is added)

`${...}` interpolations resolve as verl's OmegaConf.load does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hybridrl.config.errors import ConfigError

KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"
_FORMAT = "`interaction:`, a list of {name, class_name, config} entries (verl's format)"


@dataclass(frozen=True)
class InteractionEntry:
    """One `interaction:` entry; `where` names the file and the entry for error messages."""

    name: str
    class_name: str
    config: dict[str, Any] = field(default_factory=dict)
    where: str = ""


def default_interaction_name(class_name: str) -> str:
    """verl's name for an entry without one: the class name lower-cased, less an `Interaction` suffix."""
    simple = class_name.rsplit(".", 1)[-1]
    return (simple[: -len("Interaction")] if simple.endswith("Interaction") else simple).lower()


def read_interaction_entries(path: str) -> list[InteractionEntry]:
    """Every entry of the file, checked: raises ConfigError naming the file, the entry and the fix."""
    expanded = os.path.expanduser(os.path.expandvars(path))
    if not os.path.isfile(expanded):
        raise ConfigError(f"{KEY}={path!r}: no such file (verl's interaction YAML: {_FORMAT})")
    content = _load(expanded, path)
    entries = content.get("interaction")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{KEY}={path!r}: the file must hold {_FORMAT}; got {str(content)[:200]!r}")
    read: list[InteractionEntry] = []
    for index, raw in enumerate(entries):
        entry = _entry(raw, f"{path}: interaction[{index}]")
        clash = next((earlier for earlier, taken in enumerate(read) if taken.name == entry.name), None)
        if clash is not None:
            raise ConfigError(f"{entry.where}: interaction name {entry.name!r} is already used by "
                              f"interaction[{clash}]; each interaction needs its own `name`")
        read.append(entry)
    return read


def _load(expanded: str, path: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    try:
        content = OmegaConf.to_container(OmegaConf.load(expanded), resolve=True)
    except Exception as error:  # yaml's ScannerError/ParserError, OmegaConf's interpolation errors
        raise ConfigError(f"{KEY}={path!r} is not valid YAML: {type(error).__name__}: {error}") from None
    if not isinstance(content, dict):
        raise ConfigError(f"{KEY}={path!r}: the file must hold {_FORMAT}; got {str(content)[:200]!r}")
    return {str(key): value for key, value in content.items()}


def _entry(raw: Any, where: str) -> InteractionEntry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: an entry is a mapping {{name, class_name, config}}; got {str(raw)[:200]!r}")
    unknown = sorted(set(raw) - {"name", "class_name", "config"})
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}; an entry has name, class_name and config")
    class_name = raw.get("class_name")
    if not isinstance(class_name, str) or "." not in class_name:
        raise ConfigError(f"{where}: class_name must be an import path such as "
                          f"verl.interactions.gsm8k_interaction.Gsm8kInteraction or my_pkg.users.MyUser; got "
                          f"{class_name!r}")
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"{where}: name must be a non-empty string; got {name!r}")
    config = raw.get("config") if raw.get("config") is not None else {}
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: config must be a mapping (the class's settings); got {str(config)[:200]!r}")
    return InteractionEntry(name or default_interaction_name(class_name), class_name, dict(config), where)
