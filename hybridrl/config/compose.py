"""Compose a YAML config file the way Hydra composes verl's: `defaults:` lists, `_self_`, config groups.

The search path is the file's own folder, then hybridrl's copies of verl's config files (`verl_files.py`),
then the folders the file names in `hydra.searchpath`. So a recipe YAML whose defaults list says
`- ppo_trainer` extends hybridrl's `ppo_trainer` (its schema defaults), even when its search path also reaches
a verl checkout's `verl/trainer/config`. Hydra's own composer does the work (its internal config loader: the
public `compose()` API would also apply the overrides in struct mode, which `overrides.py` does itself).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from hybridrl.config.errors import ConfigError

HYDRA_ONLY_KEYS = ("hydra",)
VERL_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_yaml")  # made by verl_files.py


@functools.lru_cache(maxsize=1)
def _register_sources() -> None:
    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource
    from hydra._internal.core_plugins.structured_config_source import StructuredConfigSource
    from hydra._internal.sources_registry import SourcesRegistry

    for source in (FileConfigSource, ImportlibResourcesConfigSource, StructuredConfigSource):
        SourcesRegistry.instance().register(source)


def needs_composition(content: dict[str, Any]) -> bool:
    """Whether a YAML mapping uses Hydra's composition (a defaults list or a hydra: section)."""
    return "defaults" in content or "hydra" in content


def _search_path(primary_dir: str, extra: list[str]):
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl

    path = ConfigSearchPathImpl()
    path.append("main", "file://" + os.path.abspath(primary_dir))
    path.append("hybridrl", "file://" + VERL_CONFIG_DIR)
    for entry in extra:
        path.append("hydra.searchpath", entry)
    path.append("schema", "structured://")  # Hydra's loader expects its structured-config source last
    return path


def _searchpath_entries(content: dict[str, Any], config_file: str) -> list[str]:
    entries = (content.get("hydra") or {}).get("searchpath") or []
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise ConfigError(f"config file {config_file!r}: hydra.searchpath must be a list of strings, not {entries!r}")
    return [e if "://" in e else "file://" + e for e in entries]


def compose_file(config_file: str, content: dict[str, Any], group_overrides: list[str]) -> dict[str, Any]:
    """The composed tree of `config_file` (its `${...}` left unresolved), with config-group overrides applied."""
    _register_sources()
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.config_repository import CachingConfigRepository, ConfigRepository
    from hydra._internal.defaults_list import create_defaults_list
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    folder, name = os.path.split(os.path.abspath(config_file))
    search_path = _search_path(folder, _searchpath_entries(content, config_file))
    try:
        repo = CachingConfigRepository(ConfigRepository(config_search_path=search_path))
        parsed = OverridesParser.create().parse_overrides(group_overrides)
        defaults = create_defaults_list(repo=repo, config_name=os.path.splitext(name)[0], overrides_list=parsed,
                                        prepend_hydra=False, skip_missing=False)
        if defaults.config_overrides:  # parse_overrides sent only group choices here
            raise ConfigError(f"not config groups: {[o.input_line for o in defaults.config_overrides]}")
        loader = ConfigLoaderImpl(config_search_path=search_path)
        composed = loader._compose_config_from_defaults_list(defaults=defaults.defaults, repo=repo)
        tree = OmegaConf.to_container(composed, resolve=False)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(f"cannot compose config file {config_file!r}: {_first_lines(exc)}") from None
    assert isinstance(tree, dict)
    for key in HYDRA_ONLY_KEYS:
        tree.pop(key, None)
    return tree


def compose_defaults(group_overrides: list[str]) -> dict[str, Any]:
    """hybridrl's own `ppo_trainer` composed with config-group choices (`model_engine=megatron`)."""
    path = os.path.join(VERL_CONFIG_DIR, "ppo_trainer.yaml")
    return compose_file(path, {"defaults": []}, group_overrides)


@functools.lru_cache(maxsize=1)
def group_names() -> frozenset[str]:
    """Config groups of hybridrl's copies (their folders), which a command line may choose (`model_engine=...`)."""
    return frozenset(entry.name for entry in os.scandir(VERL_CONFIG_DIR) if entry.is_dir())


def _first_lines(exc: Exception) -> str:
    """Hydra's message without its search-path listing (the folders are those named in the module docstring)."""
    text = str(exc).split("Config search path:")[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines).replace("Available options in", "; options in") if lines else type(exc).__name__
