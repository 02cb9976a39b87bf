"""validate_placement: per-role `device_ids` lists and the node/device counts against what is visible."""

from __future__ import annotations

from hybridrl.config.errors import ConfigError
from hybridrl.config.roles import critic_enabled, ref_enabled
from hybridrl.config.schema import HybridRLConfig

# Pairs that must not share a device: the critic trains (or generates into) memory the other role needs.
EXCLUSIVE_PAIRS = (("actor", "critic"), ("rollout", "critic"))


def role_device_ids(cfg: HybridRLConfig) -> dict[str, tuple[str, list[int] | None, bool]]:
    """role -> (key, device_ids, role enabled)."""
    arr = cfg.actor_rollout_ref
    return {
        "actor": ("actor_rollout_ref.actor.device_ids", arr.actor.device_ids, True),
        "rollout": ("actor_rollout_ref.rollout.device_ids", arr.rollout.device_ids, True),
        "ref": ("actor_rollout_ref.ref.device_ids", arr.ref.device_ids, ref_enabled(cfg)),
        "critic": ("critic.device_ids", cfg.critic.device_ids, critic_enabled(cfg)),
        "reward_model": ("reward_model.device_ids", cfg.reward_model.device_ids, cfg.reward_model.enable),
    }


def _count_problems(cfg: HybridRLConfig, num_devices: int) -> tuple[int, list[str]]:
    trainer = cfg.trainer
    if trainer.n_gpus_per_node is None:
        return num_devices, []
    wanted = trainer.nnodes * trainer.n_gpus_per_node
    if wanted > num_devices:
        return num_devices, [
            f"trainer.nnodes x trainer.n_gpus_per_node ({trainer.nnodes} x {trainer.n_gpus_per_node} = {wanted}) asks for "
            f"more devices than the {num_devices} visible; set trainer.n_gpus_per_node={max(num_devices // trainer.nnodes, 1)} "
            "or leave it null (= all visible)"
        ]
    return wanted, []


def _list_problems(key: str, ids: list[int], total: int) -> list[str]:
    problems = []
    if not ids:
        problems.append(f"{key}=[] is empty; give at least one device index or null (= every device)")
    outside = [i for i in ids if not 0 <= i < total]
    if outside:
        problems.append(f"{key}={ids} has indices {outside} outside 0..{total - 1} ({total} devices)")
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        problems.append(f"{key}={ids} repeats {duplicates}")
    return problems


def _fsdp_size_problems(cfg: HybridRLConfig, total: int) -> list[str]:
    """fsdp_size: -1 (shard over all of the role's ranks) or a divisor of their number (hybrid sharding)."""
    arr = cfg.actor_rollout_ref
    actor_ranks = len(arr.actor.device_ids) if arr.actor.device_ids is not None else total
    roles = {"actor_rollout_ref.actor": (arr.actor.fsdp_config.fsdp_size, actor_ranks),
             "actor_rollout_ref.ref": (arr.ref.fsdp_config.fsdp_size,
                                       len(arr.ref.device_ids) if arr.ref.device_ids is not None else actor_ranks),
             "critic.model": (cfg.critic.model.fsdp_config.fsdp_size,
                              len(cfg.critic.device_ids) if cfg.critic.device_ids is not None else total)}
    return [f"{role}.fsdp_config.fsdp_size={size} must be -1 (shard over all of the role's {ranks} rank(s)) or "
            f"divide {ranks}: {', '.join(str(d) for d in range(1, ranks + 1) if ranks % d == 0)} (hybrid sharding: "
            "groups of that many ranks, replicated across groups)"
            for role, (size, ranks) in roles.items() if size != -1 and (size < 1 or ranks % size)]


def _tensor_parallel_problems(cfg: HybridRLConfig, rollout_devices: int) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    size, key = rollout.tensor_model_parallel_size, "actor_rollout_ref.rollout.tensor_model_parallel_size"
    if size == 1:
        return []
    if size < 1:
        return [f"{key}={size} must be >= 1"]
    if rollout_devices % size:
        return [f"{key}={size} does not divide the rollout's {rollout_devices} device(s): each replica takes "
                f"{size} devices; give the rollout a multiple of {size} (trainer.n_gpus_per_node or "
                f"actor_rollout_ref.rollout.device_ids) or lower {key}"]
    return []


def validate_placement(cfg: HybridRLConfig, num_devices: int) -> None:
    """Check device lists against `num_devices` (all devices of the run); raise one ConfigError listing all problems."""
    total, problems = _count_problems(cfg, num_devices)
    roles = role_device_ids(cfg)
    lists = {role: (key, ids) for role, (key, ids, enabled) in roles.items() if ids is not None}
    for role, (key, ids, enabled) in roles.items():
        if ids is not None and not enabled:
            problems.append(f"{key}={ids} is set but the {role} role is not used by this config; remove it")
    if lists and "actor" not in lists:
        given = ", ".join(f"{key}={ids}" for key, ids in lists.values())
        problems.append(f"{given} given while actor_rollout_ref.actor.device_ids is null: give every role a list or none")
    for key, ids in lists.values():
        problems += _list_problems(key, ids, total)
    problems += _tensor_parallel_problems(cfg, len(lists["rollout"][1]) if "rollout" in lists else total)
    problems += _fsdp_size_problems(cfg, total)
    for first, second in EXCLUSIVE_PAIRS:
        if first in lists and second in lists:
            shared = sorted(set(lists[first][1]) & set(lists[second][1]))
            if shared:
                problems.append(
                    f"{lists[first][0]}={lists[first][1]} and {lists[second][0]}={lists[second][1]} share devices "
                    f"{shared}; the {first} and {second} need separate devices"
                )
    if problems:
        raise ConfigError(f"{len(problems)} placement problem(s):\n" + "\n".join(f"  - {p}" for p in problems))
