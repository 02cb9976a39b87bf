"""Ulysses sequence parallelism per training role: `*.ulysses_sequence_parallel_size` (verl's keys).

A role whose size is `sp` > 1 splits each micro-batch's sequence over groups of `sp` consecutive ranks; the
ranks of one group hold the same rows, so the role's data-parallel size (what verl's per-GPU batch keys are
divided by) is its rank count / `sp`, and its token budgets (`*_max_token_len_per_gpu`) are per rank of a
group, i.e. `sp` times that per sequence-parallel group (verl's `max_token_len * ulysses_sequence_parallel_size`).
"""

from __future__ import annotations

from hybridrl.config.schema import HybridRLConfig

SP_KEYS = {
    "actor": "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "ref": "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
    "critic": "critic.ulysses_sequence_parallel_size",
}


def sequence_parallel_size(cfg: HybridRLConfig, role: str) -> int:
    """The Ulysses group size of `role` (actor, ref, critic): 1 = no sequence parallelism."""
    if role == "actor":
        return int(cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size)
    if role == "ref":
        return int(cfg.actor_rollout_ref.ref.ulysses_sequence_parallel_size)
    if role == "critic":
        return int(cfg.critic.ulysses_sequence_parallel_size)
    raise ValueError(f"no sequence-parallel size for role {role!r}; roles: {sorted(SP_KEYS)}")


def data_parallel_size(cfg: HybridRLConfig, role: str, world_size: int) -> int:
    """How many distinct row shards `role`'s `world_size` ranks hold (ranks / sequence-parallel size, at least 1)."""
    return max(world_size // sequence_parallel_size(cfg, role), 1)
