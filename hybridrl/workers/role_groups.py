"""The actor, reference and critic as the trainer calls them: proxies over the worker group hosting each.

Every run, one process included, hosts these roles on `ColocatedWorker` ranks of some group (one process: an
`InProcessGroup` over the same worker class). A proxy maps each role method onto the group explicitly:
per-row work is split across the ranks (`call_sharded`), updates return metrics reduced across the ranks
(`call_sharded_metrics`), collectives such as checkpoints run on every rank (`call_all`). Only the tensors a
rank reads travel (`for_ranks`). The rollout's proxy is `rollout_group.GroupRollout`.
"""

from __future__ import annotations

from collections.abc import Iterable

from hybridrl.config.schema import HybridRLConfig
from hybridrl.distributed import WorkerGroup
from hybridrl.rollout import SamplingParams
from hybridrl.utils.batch import Batch
from hybridrl.utils.memory import max_merge
from hybridrl.utils.metrics import reduce_metrics
from hybridrl.workers.colocated import ROLLOUT_METRICS_META

# What a forward pass on a rank reads; the rest of the batch stays on the controller.
FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")


def for_ranks(batch: Batch, keys: tuple[str, ...] | None = None) -> Batch:
    """The part of `batch` a rank call needs: its tensors (only `keys` when given) and meta. Strings and
    dicts (prompts, reward_model, extra_info, uid) stay on the controller: pickling them both ways was
    most of a group call's transport cost, and no rank method reads them."""
    tensors = batch.tensors if keys is None else {k: batch.tensors[k] for k in keys}
    return Batch(tensors=dict(tensors), meta=dict(batch.meta))


class GroupRole:
    """A role hosted by `group`'s ranks; checkpoints are collectives of the whole group. With Ulysses sequence
    parallelism (`sequence_parallel` > 1) each group of that many consecutive ranks gets one shard of the rows
    and answers once (every rank of it computes the same outputs)."""

    role: str

    def __init__(self, group: WorkerGroup, sequence_parallel: int = 1) -> None:
        self.group, self.sequence_parallel = group, sequence_parallel

    def sharded(self, method: str, batch: Batch) -> Batch:
        return self.group.call_per_replica(method, batch, self.sequence_parallel)

    def sharded_metrics(self, method: str, batch: Batch) -> dict[str, float]:
        return self.group.call_sharded_metrics(method, batch, replica_size=self.sequence_parallel)

    def save_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        self.group.call_all("save_checkpoint", self.role, role_dir, contents)

    def load_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        self.group.call_all("load_checkpoint", self.role, role_dir, contents)


class GroupActor(GroupRole):
    role = "actor"

    def compute_log_prob(self, batch: Batch) -> Batch:
        return self.sharded("compute_log_prob", for_ranks(batch, FORWARD_KEYS))

    def update_actor(self, batch: Batch) -> dict[str, float]:
        return self.sharded_metrics("update_actor", for_ranks(batch))


class GroupReference(GroupRole):
    role = "reference"

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        return self.sharded("compute_ref_log_prob", for_ranks(batch, FORWARD_KEYS))


class GroupTeacher(GroupRole):
    """The distillation teachers, hosted beside the actor; each row goes to the teacher its
    `distillation.teacher_key` field names (routed here, where the rows' fields are)."""

    role = "teacher"

    def __init__(self, group: WorkerGroup, cfg: HybridRLConfig) -> None:
        from hybridrl.config.distillation_rules import resolve_teachers

        super().__init__(group)
        self.specs, self.teacher_key = resolve_teachers(cfg), cfg.distillation.teacher_key

    def compute_teacher_log_probs(self, batch: Batch) -> Batch:
        import torch

        from hybridrl.config.distillation_rules import route_rows
        from hybridrl.workers.teacher import TEACHER_INDEX_KEY

        values = list(batch[self.teacher_key]) if self.teacher_key in batch else None
        if values is None and len(self.specs) == 1:
            values = [None] * len(batch)
        rows = for_ranks(batch, FORWARD_KEYS)
        rows[TEACHER_INDEX_KEY] = torch.tensor(route_rows(self.specs, self.teacher_key, values, [*batch.tensors, *batch.non_tensors]))
        return self.group.call_sharded("compute_teacher_log_probs", rows)


class GroupCritic(GroupRole):
    role = "critic"

    def compute_values(self, batch: Batch) -> Batch:
        return self.sharded("compute_values", for_ranks(batch, FORWARD_KEYS))

    def update_critic(self, batch: Batch) -> dict[str, float]:
        return self.sharded_metrics("update_critic", for_ranks(batch))


# ---------------------------------------------------------------- generation on a group
def generate_on(group: WorkerGroup, rows: Batch, params: SamplingParams, replica_size: int = 1, *,
                with_fields: bool = False) -> Batch:
    """`params.n` samples of each row (ROW_INDEX_KEY: the global index of its first sample) generated on
    `group`'s ranks (data-parallel over replicas of `replica_size` tensor-parallel ranks), with the rows' own
    non-tensor fields attached again on the controller (each row's n times, in order). `with_fields`: the ranks
    read those fields too (agent loops render each row's messages and pass its fields to its tools)."""
    out = group.call_per_replica("generate_sequences", rows if with_fields else for_ranks(rows), replica_size,
                                 rows_per_row=params.n, params=params)
    return Batch(non_tensors=dict(rows.non_tensors)).repeat(params.n, interleave=True).union(out)


def pop_rank_metrics(batch: Batch) -> list[dict[str, float]]:
    """Each rank's generation metrics, taken out of the gathered batch's meta (rank order)."""
    return [batch.meta.pop(key) for key in sorted(batch.meta) if key.startswith(ROLLOUT_METRICS_META)]


def pool_rollout_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    pooled = {key: [metrics[key] for metrics in per_rank if key in metrics] for key in (per_rank[0] if per_rank else {})}
    return reduce_metrics(pooled)


# ---------------------------------------------------------------- the ranks' own measurements
def pop_phase_metrics(groups: Iterable[WorkerGroup]) -> dict[str, float]:
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
