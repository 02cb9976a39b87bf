"""validate_placement: which devices each role's `*.device_ids` names, and the rules a layout keeps.

A run has N devices: GPUs on CUDA, gloo ranks (processes) on CPU, N = trainer.nnodes x trainer.n_gpus_per_node.
A role's list names some of them. Null: the actor's list for the rollout, reference and critic (they share the
actor's devices, as in the default hybrid placement), all N for the actor. Roles with the same list share one group of ranks, one process
per device, taking turns as the hybrid engine does; roles with another list get a group of their own
(config/run_plan.plan_groups). So two lists are identical or disjoint, and every device is in some list:
then the run starts exactly N processes, one per device, and the batch rules divide by what really runs.
"""

from __future__ import annotations

from hybridrl.config.errors import ConfigError
from hybridrl.config.role_devices import (RoleDevices, idle_devices, is_remote, partial_overlaps, placed_roles,
                                          reward_model_ids, role_device_ids)
from hybridrl.config.roles import critic_enabled, rollout_backend_name
from hybridrl.config.schema import HybridRLConfig

TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"


def run_size_origin(cfg: HybridRLConfig, device_type: str, num_devices: int) -> str:
    """Where the run's device count comes from, in key terms (for messages)."""
    nnodes, per_node = cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node
    nodes = f" x trainer.nnodes={nnodes}" if nnodes > 1 else ""
    if per_node is not None and nnodes * per_node == num_devices:
        return f"trainer.n_gpus_per_node={per_node}{nodes}"
    if per_node is None and device_type == "cpu" and nnodes == num_devices:
        return f"trainer.n_gpus_per_node is null: 1 on CPU{nodes}"
    if per_node is None and device_type == "cuda" and num_devices % nnodes == 0:
        return f"trainer.n_gpus_per_node is null: the {num_devices // nnodes} visible GPU(s){nodes}"
    return f"num_devices={num_devices} given to the trainer"


def _unit(device_type: str) -> str:
    return "rank" if device_type == "cpu" else "device"  # on CPU a rank is a gloo process, not a device


def _named(unit: str, ids: list[int]) -> str:
    return f"{unit} {ids[0]}" if len(ids) == 1 else f"{unit}s {ids}"


def _range_fix(cfg: HybridRLConfig, ids: list[int], total: int, num_visible: int | None) -> str:
    """More devices per node when the ids fit this machine, else ids within the run's."""
    keep = f"keep the ids in 0..{total - 1}"
    needed, nnodes = max(ids) + 1, cfg.trainer.nnodes
    per_node = -(-needed // nnodes)
    if min(ids) < 0 or (num_visible is not None and per_node > num_visible):
        return keep + (f" (only {num_visible} GPU(s) are visible)" if num_visible is not None else "")
    spare = per_node * nnodes - needed  # devices the new count adds beyond the ids: some list must name them
    extra = "" if not spare else (f" and name {_named('device', list(range(needed, needed + spare)))} in a list "
                                  f"too ({nnodes} nodes x {per_node})")
    return f"set trainer.n_gpus_per_node={per_node}{extra} (or {keep})"


def _list_problems(cfg: HybridRLConfig, key: str, ids: list[int], device_type: str, num_devices: int,
                   num_visible: int | None) -> list[str]:
    if not ids:
        return [f"{key}=[] is empty; give at least one device index, or null (= the actor's devices; for the actor "
                "every device)"]
    problems = []
    unit = _unit(device_type)
    outside = [i for i in ids if not 0 <= i < num_devices]
    if outside:
        count = f"{num_devices} {unit}{'s' if num_devices != 1 else ''}"
        problems.append(f"{key}={ids} names {_named(unit, outside)} outside 0..{num_devices - 1}: the run has {count} "
                        f"({run_size_origin(cfg, device_type, num_devices)}); "
                        f"{_range_fix(cfg, ids, num_devices, num_visible)}")
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        problems.append(f"{key}={ids} repeats {duplicates}; one rank per device, e.g. {key}={sorted(set(ids))}")
    return problems


def _shape_problems(cfg: HybridRLConfig, device_type: str, num_devices: int, num_visible: int | None) -> list[str]:
    """Each given list: not empty, in range, no repeats, and only for a role this config runs."""
    lists = role_device_ids(cfg)
    rm = cfg.reward_model
    lists["reward_model"] = ("reward_model.device_ids", rm.device_ids, rm.enable and not is_remote(rm.type, rm.model.path))
    problems = []
    for role, (key, ids, used) in lists.items():
        if ids is None:
            continue
        if not used:
            remote = (role == "critic" and critic_enabled(cfg)) or (role == "reward_model" and rm.enable)
            why = "is a remote endpoint" if remote else "is not used by this config"
            problems.append(f"{key}={ids} is set but the {role} role {why}; remove it")
        elif role == "reward_model" and device_type == "cpu":
            problems.append(f"{key}={ids} places the in-process reward model on GPUs; this CPU run scores with it on "
                            "the CPU, in the controller: remove it")
            continue
        problems += _list_problems(cfg, key, list(ids), device_type, num_devices, num_visible)
    return problems


def _overlap_problem(cfg: HybridRLConfig, first: RoleDevices, second: RoleDevices, device_type: str,
                     num_devices: int) -> str:
    """Identical lists share a group, disjoint ones have their own; a partial overlap would put two processes
    (two groups' ranks) on the shared devices."""
    from hybridrl.config.placement_fixes import overlap_fix

    shared = sorted(set(first.devices) & set(second.devices))
    return (f"{first.describe()} and {second.describe()} share device(s) {shared}; the {first.role} and "
            f"{second.role} need separate devices or the same ones (the same: one group of ranks hosts both; a "
            f"partial overlap would start two processes on {shared}): "
            f"{overlap_fix(cfg, first, second, device_type, num_devices)}")


def _unused_device_problems(cfg: HybridRLConfig, roles: list[RoleDevices], device_type: str,
                            num_devices: int) -> list[str]:
    idle = idle_devices(cfg, roles, device_type, num_devices)
    if not idle:
        return []
    used = num_devices - len(idle)
    rm_ids = reward_model_ids(cfg, device_type)
    lists = ", ".join([role.describe() for role in roles] + ([f"reward_model.device_ids={rm_ids}"] if rm_ids else []))
    one = len(idle) == 1
    return [f"{_named(_unit(device_type), idle)} of the run's {num_devices} {'is' if one else 'are'} used by no role "
            f"({lists}); name {'it' if one else 'them'} in a role's device_ids, or {_fewer_devices_fix(cfg, used, idle)}"]


def _fewer_devices_fix(cfg: HybridRLConfig, used: int, idle: list[int]) -> str:
    """Device counts giving exactly `used` devices (the lists renumbered to 0..used-1 unless the idle ones are last)."""
    renumber = "" if idle[0] == used else f" and renumber the lists to 0..{used - 1}"
    nnodes = cfg.trainer.nnodes
    if nnodes == 1:
        return f"set trainer.n_gpus_per_node={used}{renumber}"
    if used % nnodes == 0:
        return f"set trainer.n_gpus_per_node={used // nnodes}{renumber} (x trainer.nnodes={nnodes})"
    return (f"set trainer.nnodes=1 trainer.n_gpus_per_node={used}{renumber} ({used} device(s) "
            f"do not split evenly over trainer.nnodes={nnodes})")


def _fsdp_size_problems(cfg: HybridRLConfig, placed: dict[str, RoleDevices], num_devices: int) -> list[str]:
    """fsdp_size: -1 or at least the role's rank count (shard over all of them, verl's create_device_mesh) or a
    divisor of their number (hybrid sharding)."""
    actor_ranks = len(placed["actor"].devices)
    roles = {"actor_rollout_ref.actor": (cfg.actor_rollout_ref.actor.fsdp_config.fsdp_size, actor_ranks),
             "actor_rollout_ref.ref": (cfg.actor_rollout_ref.ref.fsdp_config.fsdp_size,
                                       len(placed["reference"].devices) if "reference" in placed else actor_ranks),
             "critic.model": (cfg.critic.model.fsdp_config.fsdp_size,
                              len(placed["critic"].devices) if "critic" in placed else num_devices)}
    return [f"{role}.fsdp_config.fsdp_size={size} must be -1 or >= {ranks} (shard over all of the role's {ranks} "
            f"rank(s)) or divide {ranks}: {', '.join(str(d) for d in range(1, ranks + 1) if ranks % d == 0)} (hybrid sharding: "
            "groups of that many ranks, replicated across groups)"
            for role, (size, ranks) in roles.items() if size != -1 and (size < 1 or (size < ranks and ranks % size))]


def _engine_problems(cfg: HybridRLConfig, device_type: str) -> list[str]:
    """Tensor-parallel replicas are our engine's; the hf backend has none."""
    rollout = cfg.actor_rollout_ref.rollout
    size = rollout.tensor_model_parallel_size
    if size > 1 and rollout_backend_name(cfg, device_type) == "hf":
        return [f"{TP_KEY}={size} needs the hybrid engine (rollout.name={rollout.name} is the hf backend on "
                f"{device_type}); set actor_rollout_ref.rollout.name=hybrid"]
    return []


def _tensor_parallel_problems(cfg: HybridRLConfig, rollout_devices: int) -> list[str]:
    size, key = cfg.actor_rollout_ref.rollout.tensor_model_parallel_size, TP_KEY
    if size < 1:
        return [f"{key}={size} must be >= 1"]
    if rollout_devices % size:
        return [f"{key}={size} does not divide the rollout's {rollout_devices} device(s): each replica takes "
                f"{size} devices; give the rollout a multiple of {size} (trainer.n_gpus_per_node or "
                f"actor_rollout_ref.rollout.device_ids) or lower {key}"]
    return []


def visible_count_problems(cfg: HybridRLConfig, num_devices: int, num_visible: int) -> list[str]:
    """The run's devices against the GPUs visible on this node (one node: Ray places several)."""
    if num_devices <= num_visible:
        return []
    trainer = cfg.trainer
    return [f"trainer.nnodes x trainer.n_gpus_per_node ({trainer.nnodes} x {trainer.n_gpus_per_node} = {num_devices}) "
            f"asks for more devices than the {num_visible} visible; set trainer.n_gpus_per_node="
            f"{max(num_visible // trainer.nnodes, 1)} or leave it null (= all visible)"]


def validate_placement(cfg: HybridRLConfig, num_devices: int, *, device_type: str = "cuda",
                       num_visible: int | None = None) -> None:
    """Check the `*.device_ids` lists of a run of `num_devices` devices (CUDA GPUs; on CPU gloo ranks), which the
    lists index; `num_visible`: the GPUs visible on this node, when the run must fit them. Raises one ConfigError
    listing every problem."""
    problems = visible_count_problems(cfg, num_devices, num_visible) if num_visible is not None else []
    problems += _shape_problems(cfg, device_type, num_devices, num_visible)
    well_formed = not problems
    problems += _engine_problems(cfg, device_type)
    if well_formed:  # overlaps and sizes are only meaningful for well-formed lists
        roles = placed_roles(cfg, num_devices)
        placed = {role.role: role for role in roles}
        problems += [_overlap_problem(cfg, a, b, device_type, num_devices) for a, b in partial_overlaps(roles)]
        problems += _unused_device_problems(cfg, roles, device_type, num_devices)
        problems += _tensor_parallel_problems(cfg, len(placed["rollout"].devices))
        problems += _fsdp_size_problems(cfg, placed, num_devices)
    if problems:
        raise ConfigError(f"{len(problems)} placement problem(s):\n" + "\n".join(f"  - {p}" for p in problems))
