"""Starting a run's role groups from its plan, and the roles the trainer drives through them.

Every run hosts its actor, rollout, reference and critic on `ColocatedWorker` ranks of the groups its
`RunPlan` lists: by default ONE group hosting every role (the hybrid placement: the roles share every
device and take turns); per-role `*.device_ids` lists give roles groups of their own. The launcher is the
plan's: `in_process` (one rank: the worker in this process, `InProcessGroup`), `local` (spawned processes
on this node) or `ray` (Ray actors on resource pools). Reward scoring, and a remote critic, stay on the
controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hybridrl.config.run_plan import GroupPlan, RunPlan
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.sequence_parallel import sequence_parallel_size
from hybridrl.distributed import InProcessGroup, WorkerGroup
from hybridrl.distributed.weight_sync import HANDOFF_BY_LAUNCHER, WeightHandoff
from hybridrl.logging.log import get_logger
from hybridrl.rollout.agent.trainer_rows import AgentLoopRouting
from hybridrl.utils.memory import max_merge
from hybridrl.workers.colocated import ColocatedWorker
from hybridrl.workers.protocols import ActorRole, CriticRole, ReferenceRole, RewardRole, RolloutRole, TeacherRole
from hybridrl.workers.role_groups import GroupActor, GroupCritic, GroupReference, GroupTeacher, pop_phase_metrics
from hybridrl.workers.rollout import rollout_weights_dtype
from hybridrl.workers.rollout_group import GroupRollout

log = get_logger("hybridrl.trainer")


@dataclass
class RankGroups:
    """The running groups by name and by role, and what must be released with them."""

    by_name: dict[str, WorkerGroup] = field(default_factory=dict)
    by_role: dict[str, WorkerGroup] = field(default_factory=dict)
    launcher: str = "in_process"
    pools: Any = None  # ray_launcher.ResourcePoolManager with the Ray launcher
    owns_ray: bool = False
    timeline_json_file: str | None = None  # ray_kwargs.timeline_json_file: Ray's task timeline, written at shutdown
    # The worker of a one-process run (it lives in this process), for tests and benchmarks to look into.
    local_worker: ColocatedWorker | None = None

    def phase_metrics(self) -> dict[str, float]:
        return pop_phase_metrics(self.by_name.values())

    def call_all(self, method: str, *args: Any) -> list[Any]:
        """`method` on every rank of every group, results in group then rank order."""
        return [result for group in self.by_name.values() for result in group.call_all(method, *args)]

    def shutdown(self) -> None:
        if self.launcher == "ray" and self.timeline_json_file:
            from hybridrl.distributed.ray_launcher import import_ray

            import_ray().timeline(filename=self.timeline_json_file)
            log.info(f"Ray timeline written to {self.timeline_json_file} (open it in chrome://tracing or Perfetto)")
        for group in self.by_name.values():
            group.shutdown()
        if self.pools is not None:
            self.pools.shutdown()
        if self.owns_ray:
            from hybridrl.distributed.ray_launcher import import_ray

            import_ray().shutdown()


def launch_groups(cfg: HybridRLConfig, plan: RunPlan, *, total_steps: int) -> RankGroups:
    """Start every group of the plan (in this process, local processes or Ray actors); on a failure stop the
    ones started."""
    running = RankGroups(launcher=plan.launcher)
    if plan.launcher == "ray":
        _start_ray(cfg, plan, running)
    try:
        for group_plan in plan.groups:
            if plan.launcher == "in_process":  # the controller's phases measure this process
                running.local_worker = ColocatedWorker(cfg, plan, roles=group_plan.roles, total_steps=total_steps,
                                                       measure_phases=False)
                group: WorkerGroup = InProcessGroup(running.local_worker, role=group_plan.name)
            else:
                log.info(f"starting {group_plan.name} ({', '.join(group_plan.roles)}) on "
                         f"{len(group_plan.device_ids)} {plan.device} rank(s) with the {plan.launcher} launcher")
                group = start_group(cfg, plan, group_plan, running.pools, total_steps=total_steps,
                                    node_processes=1 + sum(len(p.device_ids) for p in plan.groups))
            running.by_name[group_plan.name] = group
            running.by_role.update({role: group for role in group_plan.roles})
    except BaseException:
        running.shutdown()
        raise
    return running


def _start_ray(cfg: HybridRLConfig, plan: RunPlan, running: RankGroups) -> None:
    """Join (or start) Ray and reserve one resource pool per group."""
    from hybridrl.distributed import ResourcePoolManager, init_ray
    from hybridrl.distributed.ray_launcher import import_ray, starts_local_ray

    ray_init = dict(cfg.ray_kwargs.ray_init or {})
    running.owns_ray = not import_ray().is_initialized()
    running.timeline_json_file = cfg.ray_kwargs.timeline_json_file
    started_here = starts_local_ray(ray_init)
    init_ray(ray_init)
    running.pools = ResourcePoolManager({p.name: len(p.device_ids) for p in plan.groups},
                                        {p.name: p.name for p in plan.groups}, use_gpu=plan.device == "cuda",
                                        ready_timeout_s=cfg.trainer.ray_wait_register_center_timeout,
                                        ray_started_here=started_here)


def start_group(cfg: HybridRLConfig, plan: RunPlan, group_plan: GroupPlan, pools: Any, *, total_steps: int,
                node_processes: int, launcher: str | None = None) -> WorkerGroup:
    """One group of `ColocatedWorker` ranks in processes of their own, hosting `group_plan.roles` (`launcher`:
    "local" or "ray", the plan's unless given)."""
    from hybridrl.distributed import LocalWorkerGroup, RayWorkerGroup
    from hybridrl.distributed.cpu_threads import PROCESSES_ENV
    from hybridrl.distributed.rank_runtime import COLLECTIVE_TIMEOUT_ENV

    launcher = launcher or plan.launcher
    init_kwargs = {"cfg": cfg, "plan": plan, "roles": group_plan.roles, "total_steps": total_steps}
    # actor_rollout_ref.nccl_timeout (verl): how long the ranks' collectives wait for each other; every group's
    # ranks share the node's cores with the others and the controller (cpu_threads.py)
    env = {COLLECTIVE_TIMEOUT_ENV: str(cfg.actor_rollout_ref.nccl_timeout), PROCESSES_ENV: str(node_processes)}
    if launcher == "local":
        device_ids = list(group_plan.device_ids) if plan.device == "cuda" else None  # CPU ranks are processes
        return LocalWorkerGroup(ColocatedWorker, init_kwargs, world_size=len(group_plan.device_ids),
                                role=group_plan.name, device_ids=device_ids, env=env)
    return RayWorkerGroup(ColocatedWorker, init_kwargs, pool=pools.pool(group_plan.name), role=group_plan.name, env=env)


def start_rollout_replica(cfg: HybridRLConfig, plan: RunPlan, device_id: int, *, total_steps: int) -> WorkerGroup:
    """A one-rank group hosting only a rollout replica on `device_id` (local launcher: a spawned process,
    pinned to that GPU on CUDA); it starts from the model path, so load the current weights into it."""
    replica = GroupPlan(f"rollout_borrowed{device_id}", (device_id,), ("rollout",))
    return start_group(cfg, plan, replica, None, total_steps=total_steps, launcher="local",
                       node_processes=plan.world_size + 2)  # the run's ranks, the controller, this one


# ---------------------------------------------------------------- the roles the trainer drives
@dataclass
class Roles:
    actor: ActorRole
    rollout: RolloutRole
    reward: RewardRole
    groups: RankGroups
    handoff: WeightHandoff  # the actor's weights to rollout replicas in other processes
    reference: ReferenceRole | None = None
    critic: CriticRole | None = None
    teacher: TeacherRole | None = None  # on-policy distillation (distillation.enabled)

    def phase_metrics(self) -> dict[str, float]:
        """Every rank's peaks and phase times since the last call: the run's groups and borrowed replicas."""
        return max_merge(self.groups.phase_metrics(), self.rollout.replica_phase_metrics())

    def shutdown(self) -> None:
        """Stop the worker ranks and remove the weight buffer; safe to call twice or after a failure."""
        self.groups.shutdown()
        self.handoff.close()
        self.reward.close()


def build_roles(cfg: HybridRLConfig, plan: RunPlan, tokenizer: Any, total_steps: int) -> Roles:
    """Start the plan's groups and wrap each role in its proxy; the reward role (and a remote critic) on the
    controller. A failure stops whatever started."""
    import torch

    from hybridrl.workers.reward import RewardWorker

    groups = launch_groups(cfg, plan, total_steps=total_steps)
    reward = None
    try:
        handoff = WeightHandoff(HANDOFF_BY_LAUNCHER[plan.launcher], rollout_weights_dtype(cfg, plan.rollout_backend))
        on = groups.by_role
        rollout = GroupRollout(on["rollout"], on["actor"], handoff,
                               tensor_parallel_size=cfg.actor_rollout_ref.rollout.tensor_model_parallel_size,
                               device_ids=plan.group_of("rollout").device_ids,
                               agent_loops=AgentLoopRouting.from_config(cfg.actor_rollout_ref.rollout))
        reward = RewardWorker(cfg, tokenizer, torch.device(plan.device))
        return Roles(actor=GroupActor(on["actor"], sequence_parallel_size(cfg, "actor")), rollout=rollout,
                     reward=reward, groups=groups, handoff=handoff,
                     reference=GroupReference(on["reference"], sequence_parallel_size(cfg, "ref"))
                     if plan.needs.reference else None,
                     critic=_critic(cfg, plan, on) if plan.needs.critic else None,
                     teacher=GroupTeacher(on["teacher"], cfg) if plan.needs.teacher else None)
    except BaseException:
        if reward is not None:  # its scoring processes and a served GenRM
            reward.close()
        groups.shutdown()
        raise


def _critic(cfg: HybridRLConfig, plan: RunPlan, on: dict[str, WorkerGroup]) -> CriticRole:
    """The critic's group, or a frozen remote value model (`critic.type=vllm_api`, path = its URL)."""
    if not plan.remote_critic:
        return GroupCritic(on["critic"], sequence_parallel_size(cfg, "critic"))
    return build_remote_critic(cfg)


def build_remote_critic(cfg: HybridRLConfig) -> CriticRole:
    """`critic.type=vllm_api`: the value model at critic.model.path, with critic.remote's deadline and retries."""
    from hybridrl.workers.remote_critic import RemoteCriticWorker
    from hybridrl.workers.reward import remote_client_kwargs

    critic = RemoteCriticWorker(cfg.critic.model.path, remote_client_kwargs(cfg.critic.remote, "critic.remote"))
    log.info(critic.describe())
    return critic
