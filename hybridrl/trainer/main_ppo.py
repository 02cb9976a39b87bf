"""verl's entry-point shape: `python -m hybridrl.trainer.main_ppo key=value ...` (= `hybridrl train`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from hybridrl.config.schema import HybridRLConfig
from hybridrl.logging.log import get_logger

if TYPE_CHECKING:
    from hybridrl.config.run_plan import RunPlan
    from hybridrl.trainer.ppo_trainer import PPOTrainer

log = get_logger("hybridrl")


def make_trainer(cfg: HybridRLConfig, plan: RunPlan | None = None) -> PPOTrainer:
    """The trainer `trainer.v1.trainer_mode` asks for: PPOTrainer (sync) or AsyncPPOTrainer
    (trainer/batch_sources/async_trainer.py). `plan`: preflight's, made by the trainer when not given."""
    from hybridrl.trainer.ppo_trainer import PPOTrainer

    if cfg.trainer.v1.trainer_mode == "sync":
        return PPOTrainer(cfg, plan)
    from hybridrl.trainer.batch_sources.async_trainer import AsyncPPOTrainer

    return AsyncPPOTrainer(cfg, plan)


def run_ppo(cfg: HybridRLConfig) -> dict[str, float]:
    from hybridrl.config.input_paths import check_input_paths
    from hybridrl.trainer.preflight import preflight

    plan = preflight(cfg)  # batch sizes, placement, loggers: seconds, before the trainer's imports
    check_input_paths(cfg)  # every data, model and reward file named at once, before anything loads
    return make_trainer(cfg, plan).fit()


def main(argv: list[str] | None = None) -> int:
    """Exit code: 0 done, 2 a configuration problem (the message names the keys), 1 another known failure, 128 + the
    signal for a run stopped by SIGTERM (143) or SIGINT (130): trainer/guards/run_signals.py."""
    from hybridrl.config import load_config, parse_cli_args
    from hybridrl.errors import run_with_actionable_errors

    argv = list(sys.argv[1:] if argv is None else argv)
    from hybridrl.cli_help import train_help, wants_help

    if wants_help(argv):
        print(train_help())
        return 0
    from hybridrl.elastic.control import ignore_control_signals

    ignore_control_signals()  # SIGUSR1/SIGUSR2 before the trainer takes them (imports, config): a line, not an exit

    def load_and_run():
        config_file, overrides = parse_cli_args(argv)
        return run_ppo(load_config(overrides, config_file=config_file))

    return run_with_actionable_errors(load_and_run)


if __name__ == "__main__":
    sys.exit(main())
