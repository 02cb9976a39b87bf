"""The run plan: every decision about a run's shape, made once from the config and passed down.

`trainer.preflight` resolves what only the machine can tell (the device type, how many devices, which
launcher) and builds one frozen `RunPlan`; the trainer, the role groups and every rank read it instead of
re-deriving the same answers from the config. Torch-free and picklable: it travels to the ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.estimator_needs import estimator_needs
from hybridrl.config.roles import critic_enabled, ref_enabled, rollout_backend_name
from hybridrl.config.schema import HybridRLConfig

# The roles that run on worker ranks, in the order a rank builds them (the RNG then draws as in one process).
RANK_ROLES = ("actor", "rollout", "reference", "critic", "teacher")
# in_process: one rank, the roles in the controller's process; local: spawned processes on this node; ray.
LAUNCHERS = ("in_process", "local", "ray")


@dataclass(frozen=True)
class RoleNeeds:
    """Which optional roles and phases this run needs: data, so the loop never tests an algorithm's name."""

    critic: bool
    reference: bool
    greedy_baseline: bool
    teacher: bool = False  # on-policy distillation: the teachers' log-probs (a forward-only role, like the reference)


def role_needs(cfg: HybridRLConfig) -> RoleNeeds:
    """critic: critic.enable, or what the estimator needs; reference: a KL loss or KL in the reward; the
    greedy baseline: what the estimator needs (ReMax); the teachers: distillation.enabled."""
    return RoleNeeds(critic=critic_enabled(cfg), reference=ref_enabled(cfg),
                     greedy_baseline=estimator_needs(cfg.algorithm.adv_estimator).greedy_baseline,
                     teacher=cfg.distillation.enabled)


@dataclass(frozen=True)
class GroupPlan:
    """One group of ranks: its name (verl-style: actor_rollout_ref, actor_ref, rollout, critic, ...), the
    devices it runs on (one rank per device) and the roles each of its ranks hosts."""

    name: str
    device_ids: tuple[int, ...]
    roles: tuple[str, ...]


def plan_groups(cfg: HybridRLConfig, num_ranks: int, roles: tuple[str, ...]) -> list[GroupPlan]:
    """One group per distinct device list; roles with the same list share its ranks (a null list is the actor's,
    `config.role_devices.device_lists`). The default (no lists) is one group hosting every role: the hybrid
    engine."""
    from hybridrl.config.role_devices import device_lists

    lists = device_lists(cfg, num_ranks)
    by_devices: dict[tuple[int, ...], list[str]] = {}
    for role in RANK_ROLES:
        if role in roles:
            by_devices.setdefault(lists.get(role, lists["actor"]), []).append(role)
    return [GroupPlan(_group_name(hosted), ids, tuple(hosted)) for ids, hosted in by_devices.items()]


def _group_name(roles: list[str]) -> str:
    """verl's names (actor_rollout_ref: the actor's group, which also hosts a colocated critic, as by default);
    a critic beside other roles but not the actor is named too, so its log lines say whose they are."""
    short = {"actor": "actor", "rollout": "rollout", "reference": "ref"}
    named = [short[r] for r in roles if r in short] + (["critic"] if "critic" in roles and "actor" not in roles else [])
    return "_".join(named)


@dataclass(frozen=True)
class RunPlan:
    device: str  # "cuda" or "cpu": the ranks' device type (with Ray the driver itself may have no GPU)
    world_size: int  # ranks in all: trainer.nnodes x trainer.n_gpus_per_node (one in one process)
    actor_ranks: int  # ranks training the actor
    actor_shards: int  # its data-parallel size: actor_ranks / ulysses_sequence_parallel_size (balance_batch's parts)
    launcher: str  # one of LAUNCHERS
    groups: tuple[GroupPlan, ...]  # the groups of ranks to start (in_process: one, in this process)
    rollout_backend: str  # rollout.name with auto made concrete: "hybrid" (our engine) or "hf"
    needs: RoleNeeds
    remote_critic: bool  # the critic is a frozen model behind an HTTP endpoint (no ranks, no state)

    @property
    def on_ranks(self) -> bool:
        """Whether the roles run in worker processes (the controller then computes nothing on the devices)."""
        return self.launcher != "in_process"

    def group_of(self, role: str) -> GroupPlan:
        for group in self.groups:
            if role in group.roles:
                return group
        raise KeyError(f"no group of this run hosts the {role} role; it has {[g.name for g in self.groups]}")

    def hosts(self, role: str) -> bool:
        return any(role in group.roles for group in self.groups)


def build_run_plan(cfg: HybridRLConfig, *, device: str, world_size: int, launcher: str) -> RunPlan:
    """The plan of a validated config on `world_size` ranks of `device` started by `launcher` (`LAUNCHERS`)."""
    from hybridrl.config.role_devices import remote_critic
    from hybridrl.config.sequence_parallel import data_parallel_size
    from hybridrl.config.validate import actor_ranks

    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher {launcher!r} is not one of {LAUNCHERS}")
    needs = role_needs(cfg)
    remote = remote_critic(cfg)
    wanted = ("actor", "rollout") + (("reference",) if needs.reference else ()) + \
        (("critic",) if needs.critic and not remote else ()) + (("teacher",) if needs.teacher else ())
    ranks = actor_ranks(cfg, world_size)
    return RunPlan(device=device, world_size=world_size, actor_ranks=ranks,
                   actor_shards=data_parallel_size(cfg, "actor", ranks), launcher=launcher, groups=tuple(plan_groups(cfg, world_size, wanted)),
                   rollout_backend=rollout_backend_name(cfg, device), needs=needs, remote_critic=remote)
