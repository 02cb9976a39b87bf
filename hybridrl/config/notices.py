"""Lines the loader logs about a config it accepts: verl spellings read another way, and settings verl runs
whose effect users should know (GRPO with one response per prompt, keys verl itself ignores)."""

from __future__ import annotations

from hybridrl.config.checkpoint_rules import export_only_notices
from hybridrl.config.distillation_rules import distillation_notices
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.sequence_parallel_rules import sequence_parallel_notices

# What verl's estimators compute for a group of one response (verl/trainer/ppo/core_algos.py: a group of
# one gets mean 0 and, for GRPO, std 1), which hybridrl's algorithms/advantages.py reproduces.
SINGLETON_ADVANTAGE = {
    "grpo": "each advantage is the response's raw score (a group of one has mean 0 and std 1)",
    "grpo_vectorized": "each advantage is the response's raw score (a group of one has mean 0 and std 1)",
    "rloo": "each advantage is the response's raw score (no other response to leave out)",
    "rloo_vectorized": "every advantage is 0 (verl's vectorized RLOO zeroes groups of one): nothing is learned",
    "reinforce_plus_plus_baseline": "the baseline is 0, so advantages are the scores whitened over the batch "
                                    "(REINFORCE++ without a group baseline)",
    **{name: "each advantage is the response's reward-to-go (a group of one gets token baseline 0)"
       for name in ("optimal_token_baseline", "tir_optimal_token_baseline")},
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
    if cfg.actor_rollout_ref.rollout.sglang_rollout_mode is not None:
        notices.append(f"actor_rollout_ref.rollout.sglang_rollout_mode={cfg.actor_rollout_ref.rollout.sglang_rollout_mode}"
                       " has no effect (verl does not read it either): hybridrl's engine runs in the trainer's processes"
                       ", so actor_rollout_ref.rollout.server.* have no effect too")
    if cfg.actor_rollout_ref.actor.use_prefix_grouper:
        notices.append("actor_rollout_ref.actor.use_prefix_grouper=true: hybridrl's training forward computes each "
                       "sequence whole, prompt included: the same log-probs and gradients as verl's PrefixGrouper, "
                       "without its shared-prefix speed-up")
    if cfg.actor_rollout_ref.rollout.multi_turn.interaction_config_path:
        notices.append("actor_rollout_ref.rollout.multi_turn.interaction_config_path: verl 0.8 removed interactions "
                       "(simulated users; verl PR #6074); hybridrl keeps them, with verl's January-2026 YAML and "
                       "BaseInteraction API (docs/agentic.md)")
    return (notices + _profiler_notices(cfg) + _sampling_notices(cfg) + _validation_notices(cfg)
            + export_only_notices(cfg) + distillation_notices(cfg) + sequence_parallel_notices(cfg)
            + _kept_kv_notices(cfg) + _batch_invariant_notices(cfg))


def _batch_invariant_notices(cfg: HybridRLConfig) -> list[str]:
    arr = cfg.actor_rollout_ref
    compiled = [key for key, on in (("actor_rollout_ref.actor.use_torch_compile", arr.actor.use_torch_compile),
                                    ("actor_rollout_ref.ref.use_torch_compile", arr.ref.use_torch_compile)) if on]
    if not arr.model.batch_invariant or not compiled:
        return []
    return [f"actor_rollout_ref.model.batch_invariant=true: {' and '.join(compiled)} not applied (the actor and "
            "reference forwards run eagerly): Inductor fuses the elementwise operations and rounds them differently "
            "from the rollout engine"]


def _kept_kv_notices(cfg: HybridRLConfig) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.recompute_kv_cache_after_weight_updates or not rollout.free_cache_engine \
            or cfg.trainer.v1.trainer_mode != "colocate_async":
        return []
    return ["actor_rollout_ref.rollout.recompute_kv_cache_after_weight_updates=false with colocate_async: the KV cache "
            "stays allocated while the actor trains (parked requests keep their KV in it), so "
            "actor_rollout_ref.rollout.free_cache_engine=true frees nothing between steps; training has the device's "
            "memory minus gpu_memory_utilization's share (lower it if training runs out of memory)"]


def _sampling_notices(cfg: HybridRLConfig) -> list[str]:
    """DAPO dynamic sampling's settings with a surprising effect, and over_sample_rate, which verl reads nowhere."""
    notices = []
    rollout, groups = cfg.actor_rollout_ref.rollout, cfg.algorithm.filter_groups
    if groups.enable and rollout.n == 1:
        notices.append("warning: algorithm.filter_groups.enable=true with actor_rollout_ref.rollout.n=1 keeps every "
                       "prompt (a group of one response has nothing to compare, as in verl): dynamic sampling filters "
                       "nothing; set actor_rollout_ref.rollout.n > 1 (DAPO uses 16)")
    if groups.enable and cfg.reward_model.launch_reward_fn_async:
        notices.append("reward_model.launch_reward_fn_async with algorithm.filter_groups: each generation batch is "
                       "scored before the forward passes (the groups are filtered on their scores), so scoring "
                       "overlaps nothing")
    if rollout.over_sample_rate:
        notices.append(f"actor_rollout_ref.rollout.over_sample_rate={rollout.over_sample_rate} has no effect, as in "
                       "verl: verl's trainer (January and August 2026) reads it nowhere; every response is generated "
                       "to its end (set it to 0 to drop this line)")
    return notices


def _validation_notices(cfg: HybridRLConfig) -> list[str]:
    trainer = cfg.trainer
    if trainer.val_only and not trainer.val_before_train:
        return ["warning: trainer.val_only=true has no effect with trainer.val_before_train=false, as in verl (whose "
                "val_only acts in the validation before training): this run trains; set "
                "trainer.val_before_train=true to validate once and stop"]
    return []


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
