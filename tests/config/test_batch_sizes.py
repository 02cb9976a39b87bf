"""BatchSizes: verl's batch keys as rows per rank, divided by each role's data-parallel size (ranks / its sp)."""

from __future__ import annotations

from hybridrl.config import load_config
from hybridrl.config.batch_sizes import BatchSizes

BASE = ["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.n=4"]


def test_without_sequence_parallelism_rows_split_over_every_rank():
    sizes = BatchSizes.from_config(load_config(BASE + ["actor_rollout_ref.actor.ppo_micro_batch_size=8"]), 4)
    assert (sizes.ppo_mini, sizes.ppo_micro) == (8, 2)  # 8 prompts x 4 / 4 ranks; 8 rows / 4 ranks


def test_each_role_divides_by_its_own_data_parallel_size():
    # 4 ranks: actor sp 2 (data-parallel 2), reference sp 1 (4), critic sp 4 (1)
    cfg = load_config(BASE + [
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "actor_rollout_ref.ref.ulysses_sequence_parallel_size=1",
        "critic.ulysses_sequence_parallel_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size=8", "actor_rollout_ref.ref.log_prob_micro_batch_size=8",
        "critic.ppo_micro_batch_size=8", "critic.forward_micro_batch_size=16",
    ])  # fmt: skip
    sizes = BatchSizes.from_config(cfg, 4)
    assert sizes.ppo_mini == 16  # 8 prompts x n 4 = 32 rows / (4 ranks / sp 2)
    assert (sizes.ppo_micro, sizes.log_prob_micro) == (4, 4)  # global 8 / 2
    assert sizes.ref_log_prob_micro == 2  # global 8 / 4: the reference has no SP
    assert (sizes.critic_mini, sizes.critic_micro, sizes.critic_forward_micro) == (32, 8, 16)  # / (4 ranks / sp 4)


def test_per_gpu_keys_are_rows_per_rank_whatever_the_size():
    cfg = load_config(BASE + ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
                              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"])  # fmt: skip
    sizes = BatchSizes.from_config(cfg, 4)
    assert (sizes.ppo_mini, sizes.ppo_micro, sizes.log_prob_micro) == (16, 4, 4)  # unset log-prob micro: the ppo one
