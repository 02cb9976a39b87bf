"""The rules Ulysses sequence-parallel sizes keep (`*.ulysses_sequence_parallel_size`, config.sequence_parallel).

Per role that trains or scores here with sp > 1: its ranks split into groups of sp (so sp divides their number);
on-policy distillation runs without sequence parallelism; a LoRA reference, which is the actor's own module,
runs with the actor's. Whether the model's attention heads split over sp is known only once the model's config
is read: the runtime checks it when it loads the model.
"""

from __future__ import annotations

from hybridrl.config.batch_rules import nearby_divisors
from hybridrl.config.role_devices import remote_critic
from hybridrl.config.roles import critic_enabled, ref_enabled
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.sequence_parallel import SP_KEYS, device_ids_key, role_ranks, sequence_parallel_size

ROLE_NAMES = {"actor": "actor", "ref": "reference", "critic": "critic"}


def sequence_parallel_problems(cfg: HybridRLConfig, world_size: int) -> list[str]:
    """Every rule above for a run whose actor trains on `world_size` ranks (the reference and the critic on
    theirs: their own device_ids, else the actor's)."""
    problems = []
    for role in _roles_here(cfg):
        sp = sequence_parallel_size(cfg, role)
        if sp > 1:
            problems += _rank_problems(cfg, role, sp, role_ranks(cfg, role, world_size))
    if cfg.critic.ulysses_sequence_parallel_size > 1 and critic_enabled(cfg) and remote_critic(cfg):
        problems.append(f"{SP_KEYS['critic']}={cfg.critic.ulysses_sequence_parallel_size} has no effect: the critic "
                        "is remote (critic.type=vllm_api or an http(s) critic.model.path) and runs behind its "
                        f"endpoint; set {SP_KEYS['critic']}=1")
    return problems + _distillation_problems(cfg) + _lora_reference_problems(cfg, world_size)


def _roles_here(cfg: HybridRLConfig) -> list[str]:
    """The roles with a model on this run's ranks that this config needs."""
    return ["actor"] + (["ref"] if ref_enabled(cfg) else []) + \
        (["critic"] if critic_enabled(cfg) and not remote_critic(cfg) else [])


def _rank_problems(cfg: HybridRLConfig, role: str, sp: int, ranks: int) -> list[str]:
    key, name = SP_KEYS[role], ROLE_NAMES[role]
    if ranks < sp:
        return [f"{key}={sp} needs at least {sp} ranks, but the {name} has {ranks}: {_more_ranks_fix(cfg, role, sp)}, "
                f"or set {key}={_largest_divisor(ranks, sp)}"]
    if ranks % sp:
        sizes = " or ".join(f"{key}={d}" for d in nearby_divisors(ranks, sp))
        return [f"{key}={sp} must divide the {name}'s {ranks} ranks (each group of {sp} consecutive ranks holds the "
                f"same rows): set {sizes}, or {_more_ranks_fix(cfg, role, sp)}"]
    return []


def _largest_divisor(ranks: int, below: int) -> int:
    return max(d for d in range(1, min(ranks, below) + 1) if ranks % d == 0)


def _more_ranks_fix(cfg: HybridRLConfig, role: str, sp: int) -> str:
    """Where the role's rank count comes from: its own list, the actor's list (which a null list follows), or the
    run's devices per node."""
    own = {"ref": cfg.actor_rollout_ref.ref.device_ids, "critic": cfg.critic.device_ids}.get(role)
    if own:
        return f"list a multiple of {sp} devices in {device_ids_key(role)}"
    if cfg.actor_rollout_ref.actor.device_ids:
        return f"list a multiple of {sp} devices in {device_ids_key('actor')}"
    alternative = "" if role == "actor" else f" (or give the {ROLE_NAMES[role]} {sp} devices of its own in " \
                                             f"{device_ids_key(role)})"
    return f"set trainer.n_gpus_per_node to a multiple of {sp}{alternative}"


def _distillation_problems(cfg: HybridRLConfig) -> list[str]:
    """The teachers' forwards have no sequence parallelism, and take the reference's micro-batch settings (whose
    token budget the reference's size multiplies), so the actor and the reference must run without it."""
    if not cfg.distillation.enabled:
        return []
    keys = [SP_KEYS[role] for role in ("actor", "ref") if sequence_parallel_size(cfg, role) > 1]
    if not keys:
        return []
    settings = " and ".join(f"{key}={sequence_parallel_size(cfg, role)}"
                            for role, key in SP_KEYS.items() if key in keys)
    return [f"on-policy distillation with Ulysses sequence parallelism is not implemented (distillation.enabled=true "
            f"with {settings}): set {' and '.join(f'{key}=1' for key in keys)}, or distillation.enabled=false"]


def _lora_reference_problems(cfg: HybridRLConfig, world_size: int) -> list[str]:
    """With LoRA the reference beside the actor is the actor's module with the adapter off
    (workers/reference.LoraReferenceWorker): it runs with the actor's sequence parallelism."""
    lora_rank = cfg.actor_rollout_ref.model.lora_rank
    actor_sp, ref_sp = sequence_parallel_size(cfg, "actor"), sequence_parallel_size(cfg, "ref")
    if lora_rank <= 0 or not ref_enabled(cfg) or actor_sp == ref_sp or not _ref_beside_actor(cfg, world_size):
        return []
    return [f"{SP_KEYS['ref']}={ref_sp} differs from {SP_KEYS['actor']}={actor_sp}; with LoRA "
            f"(actor_rollout_ref.model.lora_rank={lora_rank}) the reference is the actor's own module with the "
            f"adapter off, so it runs with the actor's sequence parallelism: set {SP_KEYS['ref']}={actor_sp} "
            "(or remove it: it defaults to the actor's)"]


def _ref_beside_actor(cfg: HybridRLConfig, world_size: int) -> bool:
    ref, actor = cfg.actor_rollout_ref.ref.device_ids, cfg.actor_rollout_ref.actor.device_ids
    return not ref or sorted(ref) == sorted(actor or range(world_size))


def sequence_parallel_notices(cfg: HybridRLConfig) -> list[str]:
    """Warnings for a valid config: a role with sp > 1 keeping the padded layout (verl refuses that outright)."""
    layouts = {"actor": ("actor_rollout_ref.model.use_remove_padding", cfg.actor_rollout_ref.actor.use_remove_padding),
               "critic": ("critic.model.use_remove_padding", cfg.critic.model.use_remove_padding)}
    notices = []
    for role in _roles_here(cfg):  # the reference takes the actor's layout
        sp = sequence_parallel_size(cfg, role)
        if role in layouts and sp > 1 and not layouts[role][1]:
            key = layouts[role][0]
            notices.append(f"warning: {SP_KEYS[role]}={sp} with {key}=false: the padded layout gives attention a "
                           "(rows, 1, T, T) boolean mask over each whole sequence (T^2 bytes a row: 1 GiB at 32k "
                           f"tokens), where aligned rows need none; verl requires {key}=true with sequence "
                           "parallelism; set it")
    return notices
