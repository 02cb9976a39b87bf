"""Ulysses sequence parallelism per training role: `*.ulysses_sequence_parallel_size` (verl's keys).

A role whose size is `sp` > 1 splits each micro-batch's sequence over groups of `sp` consecutive ranks; the
ranks of one group hold the same rows, so the role's data-parallel size (what verl's per-GPU batch keys are
divided by) is its rank count / `sp`, and its token budgets (`*_max_token_len_per_gpu`) are per rank of a
group, i.e. `sp` times that per sequence-parallel group (verl's `max_token_len * ulysses_sequence_parallel_size`).
The rules these sizes keep are `config.sequence_parallel_rules`.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.schema import HybridRLConfig

SP_KEYS = {
    "actor": "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "ref": "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
    "critic": "critic.ulysses_sequence_parallel_size",
}
# The role whose model (and so whose sequence parallelism) runs each phase of config.batch_rules.DYNAMIC_BSZ_KEYS.
PHASE_ROLES = {"old_log_prob": "actor", "update_actor": "actor", "ref": "ref",
               "values": "critic", "update_critic": "critic"}


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
    """How many distinct row shards `role`'s `world_size` ranks hold (ranks / sequence-parallel size, at least 1;
    a size below 1, which config.ranges reports, counts as 1)."""
    return max(world_size // max(sequence_parallel_size(cfg, role), 1), 1)


def device_ids_key(role: str) -> str:
    """The key listing `role`'s devices (a null list: the actor's devices; for the actor every device)."""
    return {"actor": "actor_rollout_ref.actor.device_ids", "ref": "actor_rollout_ref.ref.device_ids",
            "critic": "critic.device_ids"}[role]


def role_ranks(cfg: HybridRLConfig, role: str, actor_ranks: int) -> int:
    """How many ranks run `role`, given the actor's: its own `device_ids` list when one is given, else the actor's
    devices (config.role_devices.placed_roles; an empty list counts as the actor's here: placement reports it)."""
    ids = {"actor": None, "ref": cfg.actor_rollout_ref.ref.device_ids, "critic": cfg.critic.device_ids}[role]
    return len(ids) if ids else actor_ranks


@dataclass(frozen=True)
class DataParallel:
    """One role's `ranks` seen as row shards: groups of `sp` ranks (`sp_key`) hold the same rows, so `size` =
    ranks / sp. The describing methods keep the messages of a run without sequence parallelism as they were."""

    ranks: int
    sp: int = 1
    sp_key: str = ""

    @property
    def size(self) -> int:
        return max(self.ranks // max(self.sp, 1), 1)

    def derivation(self) -> str:
        return f"{self.ranks} ranks / {self.sp_key} {self.sp}"

    def divisor(self) -> str:
        """'the number of devices (4)'; with SP 'the data-parallel size 2 (4 ranks / <sp key> 2)'."""
        if self.sp <= 1:
            return f"the number of devices ({self.ranks})"
        return f"the data-parallel size {self.size} ({self.derivation()})"

    def split_over(self) -> str:
        """'4 devices'; with SP as `divisor`."""
        return f"{self.ranks} devices" if self.sp <= 1 else self.divisor()


def data_parallel(cfg: HybridRLConfig, role: str, actor_ranks: int) -> DataParallel:
    """`role`'s ranks (`role_ranks`, from the actor's) and its sequence-parallel size, as one DataParallel."""
    return DataParallel(role_ranks(cfg, role, actor_ranks), sequence_parallel_size(cfg, role), SP_KEYS[role])
