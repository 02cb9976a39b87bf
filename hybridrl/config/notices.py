"""Lines the loader logs about a config it accepts: verl spellings read another way, and settings verl runs
whose effect users should know (GRPO with one response per prompt)."""

from __future__ import annotations

from hybridrl.config.schema import HybridRLConfig

# What verl's estimators compute for a group of one response (verl/trainer/ppo/core_algos.py: a group of
# one gets mean 0 and, for GRPO, std 1), which hybridrl's algorithms/advantages.py reproduces.
SINGLETON_ADVANTAGE = {
    "grpo": "each advantage is the response's raw score (a group of one has mean 0 and std 1)",
    "grpo_vectorized": "each advantage is the response's raw score (a group of one has mean 0 and std 1)",
    "rloo": "each advantage is the response's raw score (no other response to leave out)",
    "rloo_vectorized": "every advantage is 0 (verl's vectorized RLOO zeroes groups of one): nothing is learned",
    "reinforce_plus_plus_baseline": "the baseline is 0, so advantages are the scores whitened over the batch "
                                    "(REINFORCE++ without a group baseline)",
}


def config_notices(cfg: HybridRLConfig) -> list[str]:
    """Warnings about a valid config (each names the key to change)."""
    notices = []
    estimator, n = cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.rollout.n
    if estimator in SINGLETON_ADVANTAGE and n == 1:
        notices.append(
            f"warning: algorithm.adv_estimator={estimator} with actor_rollout_ref.rollout.n=1: "
            f"{SINGLETON_ADVANTAGE[estimator]}, as in verl; group baselines need actor_rollout_ref.rollout.n > 1 "
            "(e.g. 5)"
        )
    return notices + _profiler_notices(cfg)


PROFILED_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic", "reward_model")


def _profiler_notices(cfg: HybridRLConfig) -> list[str]:
    from hybridrl.config.index import config_value

    notices = []
    if cfg.global_profiler.tool is not None and not cfg.global_profiler.steps:
        notices.append(f"warning: global_profiler.tool={cfg.global_profiler.tool} with no global_profiler.steps profiles "
                       "nothing (as in verl); list the steps to profile, e.g. global_profiler.steps=[2,3]")
    selected = [role for role in PROFILED_ROLES
                if config_value(cfg, f"{role}.profiler.enable") or config_value(cfg, f"{role}.profiler.ranks")]
    if selected:
        notices.append(f"{', '.join(f'{role}.profiler' for role in selected)}: verl's per-role profiler settings select "
                       "roles and ranks; hybridrl's global_profiler profiles every role and rank of the listed steps")
    return notices


def log_notices(notices: list[str]) -> None:
    """Log each line once through the `hybridrl.config` logger (warnings as warnings)."""
    if not notices:
        return
    from hybridrl.logging.log import get_logger

    log = get_logger("hybridrl.config")
    for line in notices:
        if line.startswith("warning: "):
            log.warning(line.removeprefix("warning: "))
        else:
            log.info(line)
