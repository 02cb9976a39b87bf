"""verl's entry-point shape: `python -m hybridrl.trainer.main_ppo key=value ...` (= `hybridrl train`)."""

from __future__ import annotations

import sys

from hybridrl.logging.log import get_logger

log = get_logger("hybridrl")


def run_ppo(cfg) -> dict[str, float]:
    from hybridrl.trainer.preflight import preflight

    preflight(cfg)  # batch sizes, placement, loggers: seconds, before the trainer's imports
    from hybridrl.trainer.ppo_trainer import PPOTrainer

    return PPOTrainer(cfg).fit()


def main(argv: list[str] | None = None) -> int:
    from hybridrl.config import ConfigError, load_config, parse_cli_args

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config_file, overrides = parse_cli_args(argv)
        cfg = load_config(overrides, config_file=config_file)
    except ConfigError as err:
        print(f"hybridrl: configuration error:\n{err}", file=sys.stderr)
        return 2
    from hybridrl.errors import run_with_actionable_errors

    return run_with_actionable_errors(lambda: run_ppo(cfg))


if __name__ == "__main__":
    sys.exit(main())
