"""Per-device row counts derived from verl's batch-size keys.

verl semantics: `ppo_mini_batch_size` counts prompts (× rollout.n responses each) across all devices;
`*_micro_batch_size_per_gpu` counts rows on one device; the deprecated global `*_micro_batch_size`
is divided by the world size. With Ulysses sequence parallelism (config.sequence_parallel) a group of sp
ranks holds the same rows, so both are divided by the role's data-parallel size (ranks / its sp) instead,
as verl's fsdp_workers do. An unset micro batch size means "the whole mini batch" (documented hybridrl
default; verl requires one of the two keys).
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.batch_rules import resolve_micro_batch_size_per_gpu
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.sequence_parallel import data_parallel_size


@dataclass(frozen=True)
class BatchSizes:
    ppo_mini: int
    ppo_micro: int
    log_prob_micro: int
    ref_log_prob_micro: int
    critic_mini: int
    critic_micro: int
    critic_forward_micro: int

    @classmethod
    def from_config(cls, cfg: HybridRLConfig, world_size: int = 1) -> "BatchSizes":
        """`world_size`: the ranks of the group that hosts the roles (each role's rows are split over its
        data-parallel size: these ranks / the role's ulysses_sequence_parallel_size)."""
        arr, n = cfg.actor_rollout_ref, cfg.actor_rollout_ref.rollout.n
        actor, critic = arr.actor, cfg.critic
        actor_dp, ref_dp, critic_dp = (data_parallel_size(cfg, role, world_size) for role in ("actor", "ref", "critic"))

        def micro(global_value, per_gpu_value, prefix: str, dp: int, fallback: int) -> int:
            value = resolve_micro_batch_size_per_gpu(global_value, per_gpu_value, dp, prefix)
            return value if value else fallback

        ppo_mini = actor.ppo_mini_batch_size * n // actor_dp
        ppo_micro = micro(actor.ppo_micro_batch_size, actor.ppo_micro_batch_size_per_gpu,
                          "actor_rollout_ref.actor.ppo_micro_batch_size", actor_dp, ppo_mini)
        log_prob_micro = micro(arr.rollout.log_prob_micro_batch_size, arr.rollout.log_prob_micro_batch_size_per_gpu,
                               "actor_rollout_ref.rollout.log_prob_micro_batch_size", actor_dp, ppo_micro)
        ref_micro = micro(arr.ref.log_prob_micro_batch_size, arr.ref.log_prob_micro_batch_size_per_gpu,
                          "actor_rollout_ref.ref.log_prob_micro_batch_size", ref_dp, log_prob_micro)
        critic_mini = critic.ppo_mini_batch_size * n // critic_dp
        critic_micro = micro(critic.ppo_micro_batch_size, critic.ppo_micro_batch_size_per_gpu,
                             "critic.ppo_micro_batch_size", critic_dp, critic_mini)
        critic_forward = micro(critic.forward_micro_batch_size, critic.forward_micro_batch_size_per_gpu,
                               "critic.forward_micro_batch_size", critic_dp, critic_micro)
        return cls(ppo_mini, ppo_micro, log_prob_micro, ref_micro, critic_mini, critic_micro, critic_forward)
