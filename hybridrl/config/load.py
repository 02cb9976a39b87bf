"""Build a `HybridRLConfig` from defaults, an optional YAML file and command-line overrides."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import yaml

from hybridrl.config.coerce import build_section
from hybridrl.config.compat import LEGACY_WARNINGS, NOT_IMPLEMENTED, REPLACED, check_unsupported, legacy_warnings, \
    normalize_tree
from hybridrl.config.errors import ConfigError
from hybridrl.config.index import config_tree, get_in
from hybridrl.config.interpolation import resolve_tree
from hybridrl.config.overrides import TreeEditor, parse_override
from hybridrl.config.schema import HybridRLConfig

HYDRA_ONLY_KEYS = ("defaults", "hydra")
logger = logging.getLogger("hybridrl.config")


def parse_cli_args(argv: list[str]) -> tuple[str | None, list[str]]:
    """Split argv into (YAML path or None, override strings); understands --config FILE and
    --config-path DIR --config-name NAME (with or without .yaml), also in --flag=value form."""
    flags: dict[str, str] = {}
    overrides: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, has_value, value = arg.partition("=")
        if name in ("--config", "--config-path", "--config-name", "-cp", "-cn"):
            if not has_value:
                if not args:
                    raise ConfigError(f"{name} needs a value, e.g. {name} examples/gsm8k_grpo.yaml")
                value = args.pop(0)
            flags[{"-cp": "--config-path", "-cn": "--config-name"}.get(name, name)] = value
        elif arg.startswith("--"):
            raise ConfigError(f"unknown option {arg!r}; options are --config FILE or --config-path DIR --config-name NAME")
        else:
            overrides.append(arg)
    return _config_file(flags), overrides


def _config_file(flags: dict[str, str]) -> str | None:
    if "--config" in flags:
        if "--config-name" in flags or "--config-path" in flags:
            raise ConfigError("give either --config FILE or --config-path DIR --config-name NAME, not both")
        return flags["--config"]
    if "--config-name" not in flags:
        if "--config-path" in flags:
            raise ConfigError("--config-path needs --config-name NAME (the YAML file in that folder)")
        return None
    name = flags["--config-name"]
    name = name if name.endswith((".yaml", ".yml")) else name + ".yaml"
    return os.path.join(flags.get("--config-path", "."), name)


def read_yaml_file(config_file: str) -> dict[str, Any]:
    """The mapping in a YAML config file; Hydra `defaults:` lists are refused (we do not compose files)."""
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
    for key in HYDRA_ONLY_KEYS:
        if key in content:
            raise ConfigError(
                f"config file {config_file!r} has a Hydra '{key}:' entry; hybridrl does not compose Hydra "
                "defaults lists: write the keys into one file (`python -m hybridrl.config.cli` prints a full one)"
            )
    return content


def load_config(overrides: list[str] | None = None, config_file: str | None = None) -> HybridRLConfig:
    """Defaults, then `config_file`, then `overrides` (later wins); `${...}` resolved last.

    Raises one ConfigError listing every problem (unknown keys, wrong types, unsupported values).
    Value rules that depend on the device count live in `validate_config`.
    """
    editor = TreeEditor()
    if config_file is not None:
        editor.apply_mapping(read_yaml_file(config_file))
    editor.start_source()
    for text in overrides or []:
        editor.apply(parse_override(text))
    errors = editor.errors + normalize_tree(editor.tree, editor.explicit)
    if errors:
        raise ConfigError(_listing(errors))
    resolved = resolve_tree(editor.tree)
    cfg = build_section(HybridRLConfig, resolved, "", errors)
    if not errors:
        tree = config_tree(cfg)
        errors += check_unsupported({path: get_in(tree, path) for path in (*REPLACED, *NOT_IMPLEMENTED)})
    if errors:
        raise ConfigError(_listing(errors))
    for warning in legacy_warnings({path: get_in(tree, path) for path in LEGACY_WARNINGS}):
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
