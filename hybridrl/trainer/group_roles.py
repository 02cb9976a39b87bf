"""Roles backed by a worker group: the trainer calls the same methods; the work runs on N ranks.

World size > 1 starts ONE group of `ColocatedWorker` ranks (the hybrid placement: actor, rollout,
reference and critic share every device and take turns), with the local launcher (spawned processes,
one node) or Ray (`trainer.launcher`, `choose_launcher`). Each adapter below exposes what
`PPOTrainer` calls on an in-process worker and maps it onto the group: per-row work is split across
ranks (`call_sharded`), updates return metrics reduced across ranks (`call_sharded_metrics`),
collectives (weight sync, checkpoints) run on every rank (`call_all`). Reward scoring stays on the
controller. Weights never travel through the controller: `GroupActor.named_weights()` is a token
that tells `GroupRollout.sync_weights` to sync on the ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from hybridrl.distributed import WorkerGroup
from hybridrl.logging.log import get_logger
from hybridrl.rollout import SamplingParams
from hybridrl.utils.batch import Batch
from hybridrl.utils.metrics import reduce_metrics
from hybridrl.workers.colocated import ROLLOUT_METRICS_META, ROW_INDEX_KEY, ColocatedWorker

log = get_logger("hybridrl.trainer")
GROUP_ROLE = "actor_rollout_ref"  # verl's name for the colocated worker; error messages name it


def world_size(cfg, device_type: str) -> int:
    """`trainer.nnodes x trainer.n_gpus_per_node`; n_gpus_per_node null = the visible GPUs (1 on CPU)."""
    per_node = cfg.trainer.n_gpus_per_node
    if per_node is None:
        per_node = max(torch.cuda.device_count(), 1) if device_type == "cuda" else 1
    return cfg.trainer.nnodes * per_node


def check_placement(cfg, device_type: str, num_ranks: int) -> None:
    """Placement errors before any worker starts: device counts and `*.device_ids` lists.

    On CPU a rank is a gloo process, not a device: any number of ranks may share the cores, and
    `*.device_ids` index ranks. Several nodes (Ray) are checked by Ray when it places the pool.
    Explicit per-role device lists (separate groups) are not wired into the trainer yet, so a valid one
    that is not "every role on every device" is refused.
    """
    from hybridrl.config import ConfigError, validate_placement
    from hybridrl.config.placement import role_device_ids
    from hybridrl.distributed import num_visible_devices

    if cfg.trainer.nnodes == 1:
        visible = num_visible_devices(device_type)
        validate_placement(cfg, max(visible, num_ranks) if device_type == "cpu" else visible)
    lists = {key: ids for key, ids, enabled in role_device_ids(cfg).values() if ids is not None}
    everywhere = list(range(num_ranks))
    split = {key: ids for key, ids in lists.items() if sorted(ids) != everywhere}
    if split:
        raise ConfigError(f"per-role device lists that place roles on different devices ({split}) are not supported "
                          f"by the trainer yet: every role runs on all {num_ranks} device(s) (the hybrid engine). "
                          f"Remove the *.device_ids keys (or set them to {everywhere})")


# ---------------------------------------------------------------- launching
@dataclass
class GroupHandle:
    """The running group and what must be released with it (Ray pools, a Ray instance we started)."""

    group: WorkerGroup
    pools: object | None = None
    owns_ray: bool = False

    def shutdown(self) -> None:
        self.group.shutdown()
        if self.pools is not None:
            self.pools.shutdown()
        if self.owns_ray:
            from hybridrl.distributed.ray_launcher import import_ray

            import_ray().shutdown()


def launch_colocated_group(cfg, num_ranks: int, device_type: str, *, total_steps: int, reference: bool,
                           critic: bool) -> GroupHandle:
    from hybridrl.distributed import LocalWorkerGroup, RayWorkerGroup, ResourcePoolManager, choose_launcher, init_ray

    init_kwargs = {"cfg": cfg, "total_steps": total_steps, "device_type": device_type, "reference": reference,
                   "critic": critic}
    ray_init = dict(cfg.ray_kwargs.ray_init or {})
    launcher = choose_launcher(cfg.trainer.launcher, cfg.trainer.nnodes, ray_init.get("address"))
    log.info(f"starting {num_ranks} {device_type} rank(s) with the {launcher} launcher")
    if launcher == "local":
        device_ids = list(range(num_ranks)) if device_type == "cuda" else None
        return GroupHandle(LocalWorkerGroup(ColocatedWorker, init_kwargs, world_size=num_ranks, role=GROUP_ROLE,
                                            device_ids=device_ids))
    from hybridrl.distributed.ray_launcher import import_ray

    owns_ray = not import_ray().is_initialized()
    init_ray(ray_init)
    pools = ResourcePoolManager({"global_pool": num_ranks}, {GROUP_ROLE: "global_pool"}, use_gpu=device_type == "cuda")
    try:
        group = RayWorkerGroup(ColocatedWorker, init_kwargs, pool=pools.pool(GROUP_ROLE), role=GROUP_ROLE)
    except BaseException:
        pools.shutdown()
        raise
    return GroupHandle(group, pools, owns_ray)


# ---------------------------------------------------------------- the role adapters
@dataclass(frozen=True)
class RankWeights:
    """The actor's weights, which stay on the ranks of `group` (see `GroupRollout.sync_weights`)."""

    group: WorkerGroup


class GroupRole:
    role: str

    def __init__(self, group: WorkerGroup):
        self.group = group

    def save_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        self.group.call_all("save_checkpoint", self.role, role_dir, contents)

    def load_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        self.group.call_all("load_checkpoint", self.role, role_dir, contents)


class GroupActor(GroupRole):
    role = "actor"

    def compute_log_prob(self, batch: Batch) -> Batch:
        return self.group.call_sharded("compute_log_prob", batch)

    def update_actor(self, batch: Batch) -> dict[str, float]:
        return self.group.call_sharded_metrics("update_actor", batch)

    def named_weights(self) -> RankWeights:
        return RankWeights(self.group)


class GroupReference(GroupRole):
    role = "reference"

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        return self.group.call_sharded("compute_ref_log_prob", batch)


class GroupCritic(GroupRole):
    role = "critic"

    def compute_values(self, batch: Batch) -> Batch:
        return self.group.call_sharded("compute_values", batch)

    def update_critic(self, batch: Batch) -> dict[str, float]:
        return self.group.call_sharded_metrics("update_critic", batch)


class GroupRollout(GroupRole):
    """Data-parallel rollout: each rank generates a contiguous shard of the prompts (repeated n times)."""

    role = "rollout"

    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        rows = prompts.repeat(params.n, interleave=True)  # the row order one process produces
        rows[ROW_INDEX_KEY] = torch.arange(len(rows))
        batch = self.group.call_sharded("generate_sequences", rows, params=replace(params, n=1))
        per_rank = [batch.meta.pop(key) for key in sorted(batch.meta) if key.startswith(ROLLOUT_METRICS_META)]
        pooled = {key: [metrics[key] for metrics in per_rank] for key in (per_rank[0] if per_rank else {})}
        return batch, reduce_metrics(pooled)

    def sync_weights(self, named_tensors) -> None:
        if not isinstance(named_tensors, RankWeights) or named_tensors.group is not self.group:
            raise TypeError("the rollout ranks sync from the actor of their own group (GroupActor.named_weights())")
        self.group.call_all("sync_rollout_weights")
