"""print-config: `python -m hybridrl.config.cli [--config F] [--docs] [--validate] [overrides...]`."""

from __future__ import annotations

import sys
from typing import Callable

from hybridrl.config.errors import ConfigError
from hybridrl.config.index import config_tree, get_in, schema_index
from hybridrl.config.input_paths import check_input_paths
from hybridrl.config.load import config_to_yaml, load_config, parse_cli_args
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.validate import validate_run
from hybridrl.errors import is_user_facing
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


def configured_run(cfg: HybridRLConfig) -> tuple[str, int]:
    """(device type, devices) of the run as configured. The config package imports no torch, so it sees no GPU:
    trainer.device=auto counts as cpu and a null trainer.n_gpus_per_node as 1 (`hybridrl train` checks again
    against the GPUs it sees)."""
    per_node = 1 if cfg.trainer.n_gpus_per_node is None else cfg.trainer.n_gpus_per_node
    return ("cuda" if cfg.trainer.device == "cuda" else "cpu"), cfg.trainer.nnodes * per_node


PRINT_CONFIG_HELP = """usage: hybridrl print-config [--config FILE] [--docs] [--validate] [key=value ...]

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
"""


def main_print_config(argv: list[str], scan_data: Callable[[HybridRLConfig], None] | None = None) -> int:
    """Print the resolved config (YAML, or key docs with --docs); errors go to stderr with exit code 2.

    --validate also runs the checks `hybridrl train` makes before loading anything (`validate_run`), on the
    configured devices (`configured_run`), then `check_input_paths` and `scan_data` (the data pass: it needs the
    tokenizer, so `hybridrl print-config` hands it in from the layer that may load one).
    """
    if any(arg in ("-h", "--help") for arg in argv):
        print(PRINT_CONFIG_HELP)
        return 0
    flags = {"--docs", "--validate"}
    wanted = {arg for arg in argv if arg in flags}
    try:
        config_file, overrides = parse_cli_args([arg for arg in argv if arg not in flags])
        cfg = load_config(overrides, config_file)
        if "--validate" in wanted:
            validate_run(cfg, *configured_run(cfg))
            check_input_paths(cfg)
            if scan_data is not None:
                scan_data(cfg)
    except (ConfigError, MissingDependencyError) as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the data pass: a dataset or model-loading error names its fix too
        if not is_user_facing(exc):
            raise
        print(f"config error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(docs_text(cfg) if "--docs" in wanted else config_to_yaml(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main_print_config(sys.argv[1:]))
