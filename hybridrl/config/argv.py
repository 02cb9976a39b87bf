"""The command line's config-file flags: `--config FILE`, or Hydra's `--config-path DIR --config-name NAME`.

Hydra resolves a relative `--config-path` against the entry module's folder, so verl scripts write
`--config-path=config` (or `./config`) for verl's own `verl/trainer/config`; here that folder, and a verl
checkout's `verl/trainer/config` named by path, mean hybridrl's copies of those files (`verl_files.py`),
which carry hybridrl's defaults. Any other folder is read as given (relative to the working directory).
"""

from __future__ import annotations

import os

from hybridrl.config.errors import ConfigError
from hybridrl.config.compose import VERL_CONFIG_DIR

FLAGS = {"--config": "--config", "--config-path": "--config-path", "--config-name": "--config-name",
         "-cp": "--config-path", "-cn": "--config-name"}  # fmt: skip


def parse_cli_args(argv: list[str]) -> tuple[str | None, list[str]]:
    """Split argv into (config file path or None, override strings); flags also in --flag=value form."""
    flags: dict[str, str] = {}
    overrides: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, has_value, value = arg.partition("=")
        if name in FLAGS:
            if not has_value:
                if not args:
                    raise ConfigError(f"{name} needs a value, e.g. {name} examples/gsm8k_grpo.yaml")
                value = args.pop(0)
            flags[FLAGS[name]] = value
        elif arg.startswith("-"):
            raise ConfigError(f"unknown option {arg!r}; options are --config FILE or --config-path DIR --config-name NAME")
        else:
            overrides.append(arg)
    return config_file(flags), overrides


def config_file(flags: dict[str, str]) -> str | None:
    """The YAML file the flags name (`--config-name` without `.yaml` gets it added)."""
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
    return os.path.join(config_folder(flags.get("--config-path", "config"), name), name)


def config_folder(path: str, name: str) -> str:
    """Where `--config-path` points: hybridrl's copies for verl's own config folder, else the folder itself."""
    normalized = os.path.normpath(path).replace(os.sep, "/")
    is_verl_folder = normalized.endswith("verl/trainer/config")
    if is_verl_folder and os.path.isfile(os.path.join(VERL_CONFIG_DIR, name)):
        return VERL_CONFIG_DIR
    if normalized == "config" and not os.path.isfile(os.path.join(path, name)):
        return VERL_CONFIG_DIR  # Hydra: relative to verl/trainer/, the entry module's folder
    return path
