"""Roles backed by a worker group: the trainer calls the same methods; the work runs on N ranks.

World size > 1, or any run that asks for Ray (`configured_launcher`), starts groups of `ColocatedWorker` ranks,
by default ONE hosting every role (the hybrid placement: actor, rollout, reference and critic share every
device and take turns); per-role `*.device_ids` lists give roles their own groups (`config.run_plan`).
Launchers: local (spawned processes, one node) or Ray (`trainer.launcher`, `choose_launcher`). Each adapter
below exposes what `PPOTrainer` calls on an in-process worker and maps it onto the group: per-row work is
split across ranks (`call_sharded`), updates return metrics reduced across ranks (`call_sharded_metrics`),
collectives (weight sync, checkpoints) run on every rank (`call_all`). Reward scoring stays on the
controller. `GroupActor.named_weights()` is a token for the weights on the actor's ranks: a rollout on
the same ranks syncs there; a rollout on other ranks gets them through a `weight_sync.WeightHandoff`
(shared memory with the local launcher, pickled with Ray).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from hybridrl.config import HybridRLConfig
from hybridrl.config.run_plan import GroupPlan, RunPlan
from hybridrl.distributed import WorkerGroup
from hybridrl.distributed.weight_handoff import WeightManifest
from hybridrl.logging.log import get_logger
from hybridrl.rollout import SamplingParams
from hybridrl.trainer.weight_sync import RankWeights, WeightHandoff
from hybridrl.utils.batch import Batch
from hybridrl.utils.memory import max_merge
from hybridrl.utils.metrics import reduce_metrics
from hybridrl.workers.colocated import ROLLOUT_METRICS_META, ROW_INDEX_KEY, ColocatedWorker

log = get_logger("hybridrl.trainer")


# ---------------------------------------------------------------- launching
@dataclass
class RankGroups:
    """The running groups by name, each role's group, and what must be released with them."""

    groups: dict[str, WorkerGroup]
    role_group: dict[str, WorkerGroup]
    launcher: str = "local"  # or "ray": decides how weights reach a rollout on other ranks (weight_sync)
    pools: Any = None  # ray_launcher.ResourcePoolManager with the Ray launcher
    owns_ray: bool = False
    timeline_json_file: str | None = None  # ray_kwargs.timeline_json_file: Ray's task timeline, written at shutdown

    def phase_metrics(self) -> dict[str, float]:
        return pop_phase_metrics(self.groups.values())

    def call_all(self, method: str, *args) -> list:
        """`method` on every rank of every group, results in group then rank order."""
        return [result for group in self.groups.values() for result in group.call_all(method, *args)]

    def shutdown(self) -> None:
        if self.launcher == "ray" and self.timeline_json_file:
            from hybridrl.distributed.ray_launcher import import_ray

            import_ray().timeline(filename=self.timeline_json_file)
            log.info(f"Ray timeline written to {self.timeline_json_file} (open it in chrome://tracing or Perfetto)")
        for group in self.groups.values():
            group.shutdown()
        if self.pools is not None:
            self.pools.shutdown()
        if self.owns_ray:
            from hybridrl.distributed.ray_launcher import import_ray

            import_ray().shutdown()


def pop_phase_metrics(groups) -> dict[str, float]:
    """Since the last call, max over every rank of `groups`: `perf/max_memory_allocated_gb[/<phase>]` and
    `timing_s/<phase>_rank` (the slowest rank's wall time inside the phase); where several ranks ran a
    phase, also `timing_s/<phase>_rank_min` (the fastest's: the two apart is the ranks' imbalance)."""
    per_rank = [metrics for group in groups for metrics in group.call_all("pop_phase_metrics")]
    return {**max_merge(*per_rank), **fastest_rank_times(per_rank)}


def fastest_rank_times(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """`timing_s/<phase>_rank_min`: the least of the ranks' `timing_s/<phase>_rank`, for phases that more
    than one rank reported."""
    times: dict[str, list[float]] = {}
    for metrics in per_rank:
        for key, seconds in metrics.items():
            if key.startswith("timing_s/") and key.endswith("_rank"):
                times.setdefault(key, []).append(seconds)
    return {f"{key}_min": min(values) for key, values in times.items() if len(values) > 1}


def launch_groups(cfg: HybridRLConfig, plan: RunPlan, *, total_steps: int) -> RankGroups:
    """Start every planned group (local processes or Ray actors); on a failure stop the ones started."""
    from hybridrl.distributed import ResourcePoolManager, init_ray

    ray_init = dict(cfg.ray_kwargs.ray_init or {})
    launcher, plans, device_type = plan.launcher, plan.groups, plan.device
    running = RankGroups({}, {}, launcher)
    if launcher == "ray":
        from hybridrl.distributed.ray_launcher import import_ray, starts_local_ray

        running.owns_ray = not import_ray().is_initialized()
        running.timeline_json_file = cfg.ray_kwargs.timeline_json_file
        started_here = starts_local_ray(ray_init)
        init_ray(ray_init)
        running.pools = ResourcePoolManager({p.name: len(p.device_ids) for p in plans}, {p.name: p.name for p in plans},
                                            use_gpu=device_type == "cuda",
                                            ready_timeout_s=cfg.trainer.ray_wait_register_center_timeout,
                                            ray_started_here=started_here)
    try:
        for group_plan in plans:
            log.info(f"starting {group_plan.name} ({', '.join(group_plan.roles)}) on {len(group_plan.device_ids)} "
                     f"{device_type} rank(s) with the {launcher} launcher")
            group = _start_group(group_plan, launcher, running.pools, device_type,
                                 {"cfg": cfg, "total_steps": total_steps, "device_type": device_type,
                                  "roles": group_plan.roles}, node_processes=1 + sum(len(p.device_ids) for p in plans))
            running.groups[group_plan.name] = group
            running.role_group.update({role: group for role in group_plan.roles})
    except BaseException:
        running.shutdown()
        raise
    return running


def _start_group(plan: GroupPlan, launcher: str, pools: Any, device_type: str, init_kwargs: dict[str, Any],
                 node_processes: int) -> WorkerGroup:
    from hybridrl.distributed import LocalWorkerGroup, RayWorkerGroup
    from hybridrl.distributed.cpu_threads import PROCESSES_ENV
    from hybridrl.distributed.rank_runtime import COLLECTIVE_TIMEOUT_ENV

    # actor_rollout_ref.nccl_timeout (verl): how long the ranks' collectives wait for each other; every group's
    # ranks share the node's cores with the others and the controller (cpu_threads.py)
    env = {COLLECTIVE_TIMEOUT_ENV: str(init_kwargs["cfg"].actor_rollout_ref.nccl_timeout),
           PROCESSES_ENV: str(node_processes)}
    if launcher == "local":
        device_ids = list(plan.device_ids) if device_type == "cuda" else None  # CPU ranks are processes
        return LocalWorkerGroup(ColocatedWorker, init_kwargs, world_size=len(plan.device_ids), role=plan.name,
                                device_ids=device_ids, env=env)
    return RayWorkerGroup(ColocatedWorker, init_kwargs, pool=pools.pool(plan.name), role=plan.name, env=env)


# ---------------------------------------------------------------- the role adapters
class GroupRole:
    role: str

    def __init__(self, group: WorkerGroup):
        self.group = group

    def save_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        self.group.call_all("save_checkpoint", self.role, role_dir, contents)

    def load_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        self.group.call_all("load_checkpoint", self.role, role_dir, contents)


# What a forward pass on a rank reads; the rest of the batch stays on the controller.
FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")


def for_ranks(batch: Batch, keys: tuple[str, ...] | None = None) -> Batch:
    """The part of `batch` a rank call needs: its tensors (only `keys` when given) and meta. Strings and
    dicts (prompts, reward_model, extra_info, uid) stay on the controller: pickling them both ways was
    most of a group call's transport cost, and no rank method reads them."""
    tensors = batch.tensors if keys is None else {k: batch.tensors[k] for k in keys}
    return Batch(tensors=dict(tensors), meta=dict(batch.meta))


def generate_on(group: WorkerGroup, rows: Batch, params: SamplingParams, replica_size: int = 1) -> Batch:
    """`params.n` samples of each row (ROW_INDEX_KEY: the global index of its first sample) generated on
    `group`'s ranks (data-parallel over replicas of `replica_size` tensor-parallel ranks), with the rows' own
    non-tensor fields attached again on the controller (each row's n times, in order)."""
    out = group.call_per_replica("generate_sequences", for_ranks(rows), replica_size, rows_per_row=params.n,
                                 params=params)
    return Batch(non_tensors=dict(rows.non_tensors)).repeat(params.n, interleave=True).union(out)


class GroupActor(GroupRole):
    role = "actor"

    def compute_log_prob(self, batch: Batch) -> Batch:
        return self.group.call_sharded("compute_log_prob", for_ranks(batch, FORWARD_KEYS))

    def update_actor(self, batch: Batch) -> dict[str, float]:
        return self.group.call_sharded_metrics("update_actor", for_ranks(batch))

    def named_weights(self) -> RankWeights:
        return RankWeights(self.group)


class GroupReference(GroupRole):
    role = "reference"

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        return self.group.call_sharded("compute_ref_log_prob", for_ranks(batch, FORWARD_KEYS))


class GroupCritic(GroupRole):
    role = "critic"

    def compute_values(self, batch: Batch) -> Batch:
        return self.group.call_sharded("compute_values", for_ranks(batch, FORWARD_KEYS))

    def update_critic(self, batch: Batch) -> dict[str, float]:
        return self.group.call_sharded_metrics("update_critic", for_ranks(batch))


class GroupRollout(GroupRole):
    """Data-parallel rollout: each replica (one rank, or `tensor_parallel_size` ranks) generates the n samples
    of a contiguous shard of the prompts."""

    role = "rollout"

    def __init__(self, group: WorkerGroup, handoff: WeightHandoff, tensor_parallel_size: int = 1):
        super().__init__(group)
        self.handoff = handoff
        self.tensor_parallel_size = tensor_parallel_size

    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        """Each replica gets whole prompts and samples them n times, as one process would, when the prompts
        divide evenly; otherwise the rows are repeated n times here and split row by row. Either way the
        rows come back in one process's order (a prompt's samples together) with one process's samples."""
        replicas = self.group.world_size // self.tensor_parallel_size
        if len(prompts) % replicas == 0:  # prompts travel and are unpadded once, not n times
            rows, row_params = prompts, params
        else:
            rows, row_params = prompts.repeat(params.n, interleave=True), replace(params, n=1)
        rows = rows.union(Batch({ROW_INDEX_KEY: torch.arange(len(rows)) * row_params.n}))
        batch = generate_on(self.group, rows, row_params, self.tensor_parallel_size)
        return batch, pool_rollout_metrics(pop_rank_metrics(batch))

    def sync_weights(self, named_tensors) -> dict[str, float]:
        """On the ranks when the actor shares them (colocated: nothing leaves them); else the handoff gathers
        the weights from the actor's group and every rollout rank loads them. Also takes a payload already
        gathered by the handoff (a `WeightManifest` or a dict of tensors). Returns the handoff's metrics."""
        if isinstance(named_tensors, RankWeights) and named_tensors.group is self.group:
            self.group.call_all("sync_rollout_weights")
            return {}
        if isinstance(named_tensors, RankWeights):
            named_tensors = self.handoff.gather(named_tensors)
        elif not isinstance(named_tensors, (dict, WeightManifest)):
            raise TypeError("rollout ranks take the actor's weights as GroupActor.named_weights() (a RankWeights) "
                            f"or a payload of WeightHandoff.gather, not {type(named_tensors).__name__}")
        self.handoff.load(self.group, named_tensors)
        return self.handoff.metrics()


def pop_rank_metrics(batch: Batch) -> list[dict[str, float]]:
    """Each rank's generation metrics, taken out of the gathered batch's meta (rank order)."""
    return [batch.meta.pop(key) for key in sorted(batch.meta) if key.startswith(ROLLOUT_METRICS_META)]


def pool_rollout_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    pooled = {key: [metrics[key] for metrics in per_rank if key in metrics] for key in (per_rank[0] if per_rank else {})}
    return reduce_metrics(pooled)


def start_rollout_replica(cfg: HybridRLConfig, device_id: int, device_type: str, *, total_steps: int) -> WorkerGroup:
    """A one-rank group hosting only a rollout replica on `device_id` (local launcher: a spawned process,
    pinned to that GPU on CUDA); it starts from the model path, so load the current weights into it."""
    from hybridrl.trainer.preflight import world_size

    plan = GroupPlan(f"rollout_borrowed{device_id}", (device_id,), ("rollout",))
    return _start_group(plan, "local", None, device_type, {"cfg": cfg, "total_steps": total_steps,
                                                          "device_type": device_type, "roles": plan.roles},
                        node_processes=world_size(cfg, device_type) + 2)  # the run's ranks, the controller, this one
