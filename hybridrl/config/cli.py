"""print-config: `python -m hybridrl.config.cli [--config F] [--docs] [--validate [--device cuda|cpu]] [overrides...]`."""

from __future__ import annotations

import sys
from typing import Callable

from hybridrl.config.errors import ConfigError
from hybridrl.config.index import config_tree, get_in, schema_index
from hybridrl.config.input_paths import check_input_paths
from hybridrl.config.load import config_to_yaml, load_config, parse_cli_args
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.validate import validate_run
from hybridrl.logging.backends import MissingDependencyError


def docs_text(cfg: HybridRLConfig) -> str:
    """One line per key: `path: value  # doc`, with `${...}` defaults shown as `(default ...)`."""
    tree = config_tree(cfg)
    lines = []
    for spec in schema_index().values():
        if spec.section is not None:
            lines.append(f"{spec.path}:  # {spec.doc}")
            continue
        follows = f" (default {spec.ref})" if spec.ref else ""
        lines.append(f"{spec.path}: {get_in(tree, spec.path)!r}  # {spec.doc}{follows}")
    return "\n".join(lines) + "\n"


def configured_run(cfg: HybridRLConfig, device: str | None = None) -> tuple[str, int]:
    """(device type, devices) of the run as configured. The config package imports no torch, so it sees no GPU:
    trainer.device=auto counts as cpu unless `device` (print-config's --device) says which machine to validate
    for, and a null trainer.n_gpus_per_node as 1 (`hybridrl train` checks again against the GPUs it sees)."""
    per_node = 1 if cfg.trainer.n_gpus_per_node is None else cfg.trainer.n_gpus_per_node
    if cfg.trainer.device in ("cuda", "cpu"):
        device = cfg.trainer.device
    return (device or "cpu"), cfg.trainer.nnodes * per_node


def _option(argv: list[str], name: str, choices: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """`--name VALUE` or `--name=VALUE` taken out of argv."""
    rest, value, args = [], None, list(argv)
    while args:
        arg = args.pop(0)
        if arg == name or arg.startswith(name + "="):
            value = arg.partition("=")[2] if "=" in arg else (args.pop(0) if args else "")
            if value not in choices:
                raise ConfigError(f"{name} takes one of {', '.join(choices)}, not {value!r}")
        else:
            rest.append(arg)
    return value, rest


PRINT_CONFIG_HELP = """usage: hybridrl print-config [--config FILE] [--docs] [--validate [--device cuda|cpu]] [key=value ...]

Print the fully resolved configuration as YAML: defaults, then the config file, then the overrides (verl's grammar:
`a.b=1`, `+a.b=1`, `++a.b=1`, `~a.b`).

options:
  -h, --help     show this help and exit
  --config FILE  a YAML file of keys; the overrides apply on top
  --docs         one line per key: its value and its doc line
  --validate     also run every check `hybridrl train` makes before its first step: batch sizes, placement and
                 loggers on the configured devices; that every data, model, reward-function and tool file exists;
                 and one pass over the data (overlong prompts under data.truncation=error, rows without
                 reward_model.ground_truth). Exit status 2 names what to fix.
  --device D     with --validate: check trainer.device=auto as a machine with D (cuda or cpu) would; without it
                 print-config, which imports no torch, counts auto as cpu
"""


def main_print_config(argv: list[str], scan_data: Callable[[HybridRLConfig], None] | None = None) -> int:
    """Print the resolved config (YAML, or key docs with --docs); errors go to stderr with exit code 2.

    --validate also runs the checks `hybridrl train` makes before loading anything (`validate_run`), on the
    configured devices (`configured_run`; `--device cuda` validates trainer.device=auto as a GPU machine would),
    then `check_input_paths` and `scan_data` (the data pass: it needs the tokenizer, so `hybridrl print-config`
    hands it in from the layer that may load one).
    """
    if any(arg in ("-h", "--help") for arg in argv):
        print(PRINT_CONFIG_HELP)
        return 0
    flags = {"--docs", "--validate"}
    wanted = {arg for arg in argv if arg in flags}
    try:
        device, argv = _option(argv, "--device", ("cuda", "cpu"))
        config_file, overrides = parse_cli_args([arg for arg in argv if arg not in flags])
        cfg = load_config(overrides, config_file)
        if "--validate" in wanted:
            validate_run(cfg, *configured_run(cfg, device))
            check_input_paths(cfg)
            if scan_data is not None:
                scan_data(cfg)
    except (ConfigError, MissingDependencyError) as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(docs_text(cfg) if "--docs" in wanted else config_to_yaml(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main_print_config(sys.argv[1:]))
