"""The run's interactions from `multi_turn.interaction_config_path` (verl's YAML, read by
hybridrl.config.interaction_file): one instance per entry, by name. `class_name` is an import path; verl's own
classes map onto hybridrl's built-ins, and user files written against verl (`from verl.interactions.base
import BaseInteraction`, `from verl.utils.rollout_trace import rollout_trace_op`) load unchanged.
"""

from __future__ import annotations

import importlib
import logging

from hybridrl.config.errors import ConfigError
from hybridrl.config.interaction_file import InteractionEntry, read_interaction_entries
from hybridrl.rollout.interactions.base import BaseInteraction
from hybridrl.rollout.interactions.verl_compat import verl_interaction_modules

logger = logging.getLogger("hybridrl.rollout.interactions")

VERL_INTERACTION_CLASSES: dict[str, str] = {
    "verl.interactions.gsm8k_interaction.Gsm8kInteraction": "hybridrl.rollout.interactions.gsm8k.Gsm8kInteraction",
    "verl.interactions.base.BaseInteraction": "hybridrl.rollout.interactions.base.BaseInteraction",
}
VERL_INTERACTIONS_NOT_HERE: dict[str, str] = {
    "verl.interactions.weather_interaction.WeatherInteraction":
        "verl's weather demo interaction is not shipped; copy it into your package (it subclasses BaseInteraction, "
        "`from verl.interactions.base import BaseInteraction` works unchanged) and name that class",
}
_METHODS = ("start_interaction", "generate_response", "finalize_interaction")


def load_interactions(path: str | None) -> dict[str, BaseInteraction]:
    """Every interaction of the file by name ({} without a file); a ConfigError names the file and entry."""
    if not path:
        return {}
    return {entry.name: build_interaction(entry) for entry in read_interaction_entries(path)}


def build_interaction(entry: InteractionEntry) -> BaseInteraction:
    cls = import_interaction_class(entry.class_name, entry.where)
    try:
        interaction = cls(config={**entry.config, "name": entry.name})
    except Exception as error:
        raise ConfigError(f"{entry.where}: {entry.class_name}(config={entry.config!r}) failed: "
                          f"{type(error).__name__}: {error}") from error
    missing = [name for name in _METHODS if not callable(getattr(interaction, name, None))]
    if missing:
        raise ConfigError(f"{entry.where}: {entry.class_name} lacks {missing}; interaction classes subclass "
                          f"hybridrl.rollout.interactions.BaseInteraction (verl's verl.interactions.base)")
    return interaction


def import_interaction_class(class_name: str, where: str) -> type:
    """The class at `module.path.Name`, verl's built-ins mapped to hybridrl's (announced in the log)."""
    if class_name in VERL_INTERACTIONS_NOT_HERE:
        raise ConfigError(f"{where}: class_name {class_name!r}: {VERL_INTERACTIONS_NOT_HERE[class_name]}")
    target = VERL_INTERACTION_CLASSES.get(class_name, class_name)
    if target != class_name:
        logger.info("interaction class %s is verl's; using hybridrl's %s (same behaviour)", class_name, target)
    module_name, _, attr = target.rpartition(".")
    try:
        with verl_interaction_modules():
            module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"{where}: class_name {class_name!r}: cannot import module {module_name!r} ({error}); check "
                          f"the path and that its package is importable (on PYTHONPATH)") from error
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ConfigError(f"{where}: class_name {class_name!r}: module {module_name!r} has no class {attr!r}")
    return cls
