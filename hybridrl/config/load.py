"""Build a `HybridRLConfig` from defaults, an optional YAML file and command-line overrides.

Order: the schema defaults; the config file (composed by Hydra when it has a `defaults:` list or a
`hydra:` section, e.g. a recipe extending `ppo_trainer`; a plain or dumped YAML is merged as is); config-group
choices on the command line (`model_engine=megatron`); the key overrides, left to right. Then the two-spellings
rule, `${...}` resolution (OmegaConf), verl's older keys translated, the engine names, and the typed build.
Every problem found on the way is reported in one ConfigError, refusals of named features first.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
from typing import Any

import yaml

from hybridrl.config.agreement import compare_pairs, copy_set_spelling, derived_settings
from hybridrl.config.argv import parse_cli_args
from hybridrl.config.coerce import build_section
from hybridrl.config.compat import LEGACY_WARNINGS, check_unsupported, legacy_warnings
from hybridrl.config.compose import compose_defaults, compose_file, group_names, needs_composition
from hybridrl.config.engine_names import apply_engine_names
from hybridrl.config.errors import ConfigError
from hybridrl.config.index import get_in, schema_index, set_in
from hybridrl.config.interpolation import resolve_tree
from hybridrl.config.legacy import translate_legacy
from hybridrl.config.megatron_only import drop_megatron_only
from hybridrl.config.notices import config_notices, log_notices
from hybridrl.config.overrides import CLI, FILE, TreeEditor, parse_overrides
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.spellings import referenced_aliases

logger = logging.getLogger("hybridrl.config")

__all__ = ["config_to_dict", "config_to_yaml", "load_config", "parse_cli_args", "read_yaml_file"]


def read_yaml_file(config_file: str) -> dict[str, Any]:
    """The mapping in a YAML config file (not yet composed)."""
    if not os.path.isfile(config_file):
        raise ConfigError(f"config file {config_file!r} does not exist")
    with open(config_file, encoding="utf-8") as handle:
        try:
            content = yaml.safe_load(handle)
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {config_file!r} is not valid YAML: {exc}") from None
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ConfigError(f"config file {config_file!r} must hold a mapping of keys, not a {type(content).__name__}")
    return content


def _file_tree(config_file: str | None, groups: list[str]) -> dict[str, Any] | None:
    if config_file is None:
        return compose_defaults(groups) if groups else None
    content = read_yaml_file(config_file)
    if groups or needs_composition(content):
        return compose_file(config_file, content, groups)
    return content


def _edited_tree(overrides: list[str], config_file: str | None) -> TreeEditor:
    sections = {path for path, spec in schema_index().items() if spec.section is not None}
    parsed = parse_overrides(overrides, group_names() - sections)  # `data=...` is the data section's
    editor = TreeEditor()
    base = _file_tree(config_file, parsed.groups)
    if base is not None:
        editor.start_source(FILE)
        editor.apply_mapping(base)
    editor.start_source(CLI)
    for override in parsed.keys:
        editor.apply(override)
    return editor


def _resolved(tree: dict[str, Any]) -> dict[str, Any]:
    """`${...}` resolved, with references to another verl layout's spelling pointing at the internal key."""
    back_refs = {old: new for old, new in referenced_aliases(_interpolations(tree)).items() if not _has(tree, old)}
    if not back_refs:
        return resolve_tree(tree)
    staged = copy.deepcopy(tree)
    for old, new in back_refs.items():
        set_in(staged, old, "${" + new + "}")
    resolved = resolve_tree(staged)
    for old in back_refs:
        root = old.split(".")[0]
        if root not in tree:
            resolved.pop(root, None)
        else:
            parent, _, leaf = old.rpartition(".")
            get_in(resolved, parent).pop(leaf, None)
    return resolved


def _interpolations(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [text for value in node.values() for text in _interpolations(value)]
    if isinstance(node, list):
        return [text for value in node for text in _interpolations(value)]
    return [node] if isinstance(node, str) and "${" in node else []


def _has(tree: dict[str, Any], path: str) -> bool:
    try:
        get_in(tree, path)
    except KeyError:
        return False
    return True


def load_config(overrides: list[str] | None = None, config_file: str | None = None) -> HybridRLConfig:
    """Defaults, then `config_file`, then `overrides` (later wins); `${...}` resolved last.

    Raises one ConfigError listing every problem (unknown keys, wrong types, refused values).
    Value rules that depend on the device count live in `validate_config`.
    """
    editor = _edited_tree(overrides or [], config_file)
    errors = list(editor.errors)
    pairs = copy_set_spelling(editor.tree, editor.explicit)
    resolved = _resolved(editor.tree)
    errors += compare_pairs(resolved, pairs) + derived_settings(resolved, editor.explicit)
    legacy_problems, notices = translate_legacy(resolved, editor.explicit)
    notices += drop_megatron_only(resolved, editor.megatron_only)
    engine_problems, engine_notices = apply_engine_names(resolved, editor.explicit)
    errors += legacy_problems + engine_problems
    refusals = check_unsupported(resolved)
    cfg = build_section(HybridRLConfig, resolved, "", errors)
    if refusals or errors:
        raise ConfigError(_listing(refusals + errors))
    log_notices(notices + engine_notices + config_notices(cfg))
    for warning in legacy_warnings({path: get_in(resolved, path) for path in LEGACY_WARNINGS}):
        logger.warning(warning)
    return cfg


def _listing(errors: list[str]) -> str:
    if len(errors) == 1:
        return errors[0]
    return f"{len(errors)} config problems:\n" + "\n".join(f"  - {error}" for error in errors)


def config_to_dict(cfg: HybridRLConfig) -> dict[str, Any]:
    """The config as plain nested dicts/lists (a deep copy), in schema order."""
    return dataclasses.asdict(cfg)


def config_to_yaml(cfg: HybridRLConfig) -> str:
    """The config as YAML that `load_config(config_file=...)` reads back to an equal config."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False, width=120)
