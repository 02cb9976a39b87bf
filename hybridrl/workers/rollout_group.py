"""The rollout as the trainer calls it: data-parallel generation over its group's replicas and borrowed ones.

The rollout's own group holds replicas of one rank each, or of `tensor_parallel_size` ranks. An elastic
rollout borrows more devices at runtime (`hybridrl.elastic`): each becomes a one-rank replica group inside
this rollout, loaded with the actor's current weights; it holds no training state, so checkpoints do not
mention it. Without borrowed replicas each own replica gets whole prompts when they divide evenly; with
them the prompts are repeated n times, numbered and cut into contiguous slices (one per rank, own and
borrowed), each keyed by its global rows (`SamplingParams.row_offset`): with `rollout.name=hybrid` the
samples, and so the training, are those of one process whatever the split (the hf backend draws one
stream per call, so its samples change with the split). A borrowed replica that fails is stopped and its
slice generated again by the own group.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import torch

from hybridrl.distributed import GroupClosedError, WorkerDiedError, WorkerError, WorkerGroup
from hybridrl.distributed.weight_handoff import Payload
from hybridrl.distributed.weight_sync import WeightHandoff
from hybridrl.logging.log import get_logger
from hybridrl.rollout import SamplingParams
from hybridrl.rollout.agent.trainer_rows import AGENT_LOOP_META, AgentLoopRouting, finish_agent_rows
from hybridrl.utils.batch import Batch
from hybridrl.workers.colocated import ROW_INDEX_KEY
from hybridrl.workers.request_pool import FinishedGroup, GroupRequest
from hybridrl.workers.role_groups import generate_on, pool_rollout_metrics, pop_phase_metrics, pop_rank_metrics

log = get_logger("hybridrl.trainer")
REPLICA_FAILURES = (WorkerError, WorkerDiedError, GroupClosedError)
Generated = tuple[Batch, list[dict[str, float]]]  # rows, and each rank's generation metrics


class GroupRollout:
    """`group`: the rollout's own ranks, on `device_ids`. `actor`: the actor's group, whose weights
    `sync_weights` brings over (on the ranks themselves when it is `group`: colocated). `handoff`: how
    weights reach every other rollout group."""

    def __init__(self, group: WorkerGroup, actor: WorkerGroup, handoff: WeightHandoff, *,
                 tensor_parallel_size: int = 1, device_ids: tuple[int, ...] = (0,),
                 agent_loops: AgentLoopRouting = AgentLoopRouting()) -> None:
        """`agent_loops`: which batches the ranks generate with agent loops (multi-turn, tools)."""
        self.group, self.actor, self.handoff = group, actor, handoff
        self.agent_loops = agent_loops
        self.tensor_parallel_size = tensor_parallel_size
        self.own_devices = device_ids
        self.borrowed: dict[int, WorkerGroup] = {}  # device -> its one-rank replica group

    @property
    def devices(self) -> list[int]:
        return list(self.own_devices) + list(self.borrowed)

    # ------------------------------------------------------------------ generation
    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        """With agent loops (`self.agent_loops.wanted`) the rows travel with their fields, and the step's agent
        metrics are computed here over every rank's trajectories."""
        if self.agent_loops.wanted(prompts):
            prompts = Batch(prompts.tensors, prompts.non_tensors, {**prompts.meta, AGENT_LOOP_META: True})
        batch, per_rank = self._generate_split(prompts, params) if self.borrowed else self._generate_own(prompts,
                                                                                                          params)
        batch.meta.pop(AGENT_LOOP_META, None)
        return batch, {**pool_rollout_metrics(per_rank), **finish_agent_rows(batch)}

    def _generate_own(self, prompts: Batch, params: SamplingParams) -> Generated:
        """Each replica gets whole prompts and samples them n times, as one process would, when the prompts
        divide evenly; otherwise the rows are repeated n times here and split row by row. Either way the
        rows come back in one process's order (a prompt's samples together) with one process's samples."""
        replicas = self.group.world_size // self.tensor_parallel_size
        if len(prompts) % replicas == 0:  # prompts travel and are unpadded once, not n times
            rows, row_params = prompts, params
        else:
            rows, row_params = prompts.repeat(params.n, interleave=True), replace(params, n=1)
        rows = rows.union(Batch({ROW_INDEX_KEY: torch.arange(len(rows)) * row_params.n}))
        batch = generate_on(self.group, rows, row_params, self.tensor_parallel_size, with_fields=_with_fields(rows))
        return batch, pop_rank_metrics(batch)

    def _generate_split(self, prompts: Batch, params: SamplingParams) -> Generated:
        rows = prompts.repeat(params.n, interleave=True)  # the row order one process produces
        params = replace(params, n=1)
        parts: list[tuple[int | None, int]] = [(None, self.group.world_size)]  # (borrowed device, ranks)
        parts += [(device, group.world_size) for device, group in self.borrowed.items()]
        bounds = _split(len(rows), [ranks for _, ranks in parts])
        jobs = [(device, start, end) for (device, _), (start, end) in zip(parts, bounds) if end > start]
        outputs: dict[int | None, Generated] = {}
        with ThreadPoolExecutor(max_workers=max(len(jobs) - 1, 1)) as pool:
            futures = {device: pool.submit(self._generate_on, device, rows, start, end, params)
                       for device, start, end in jobs if device is not None}
            if bounds[0][1] > bounds[0][0]:
                outputs[None] = self._generate_on(None, rows, *bounds[0], params)
            for borrowed, future in futures.items():
                try:
                    outputs[borrowed] = future.result()
                except REPLICA_FAILURES as err:
                    self._drop(borrowed, f"it failed while generating ({type(err).__name__}: {_first_line(err)}); "
                                         f"its rows are generated on the remaining devices")
        for device, start, end in jobs:  # a failed replica's slice, redone by the rollout's own ranks
            if device not in outputs:
                outputs[device] = self._generate_on(None, rows, start, end, params)
        batch = Batch.concat([outputs[device][0] for device, _, _ in jobs])
        return batch, [metrics for device, _, _ in jobs for metrics in outputs[device][1]]

    def _generate_on(self, device: int | None, rows: Batch, start: int, end: int,
                     params: SamplingParams) -> Generated:
        """Rows [start, end) on the rollout's own ranks (device None) or a borrowed replica."""
        shard = rows.index(slice(start, end))
        shard[ROW_INDEX_KEY] = torch.arange(start, end)
        if device is None:
            batch = generate_on(self.group, shard, params, self.tensor_parallel_size, with_fields=_with_fields(rows))
        else:
            batch = generate_on(self.borrowed[device], shard, params, with_fields=_with_fields(rows))
        return batch, pop_rank_metrics(batch)

    # ------------------------------------------------------------------ weights
    def sync_weights(self) -> dict[str, float]:
        """The actor's current weights into every replica: on the ranks themselves when the actor shares them
        (colocated: nothing leaves them), else gathered ONCE by the actor's group and loaded by every other
        rollout group; the handoff's metrics when it gathered (perf/update_weights_gb), else none."""
        colocated = self.actor is self.group
        if colocated:
            self.group.call_all("sync_rollout_weights")
            if not self.borrowed:
                return {}
        payload = self.handoff.gather(self.actor)
        if not colocated:
            self.handoff.load(self.group, payload)
        self._load_borrowed(list(self.borrowed), payload)
        return self.handoff.metrics()

    def _load_borrowed(self, devices: list[int], payload: Payload) -> None:
        """The same payload into each borrowed replica, in parallel; a replica that fails is returned."""
        with ThreadPoolExecutor(max_workers=max(len(devices), 1)) as pool:
            futures = {d: pool.submit(self.handoff.load, self.borrowed[d], payload) for d in devices}
        for device, future in futures.items():
            try:
                future.result()
            except REPLICA_FAILURES as err:
                self._drop(device, f"it failed to load the weights ({type(err).__name__}: {_first_line(err)})")

    def gather_weights(self) -> Payload:
        """The actor's weights gathered once for a rollout on devices of its own, to `load_weights` later (the
        asynchronous trainer gathers while the rollout still generates, then pauses it only for the load)."""
        return self.handoff.gather(self.actor)

    def load_weights(self, payload: Payload) -> dict[str, float]:
        """A gathered payload into the rollout's own replicas; the handoff's metrics."""
        self.handoff.load(self.group, payload)
        return self.handoff.metrics()

    # ------------------------------------------------------------------ request-level generation (async)
    @property
    def num_replicas(self) -> int:
        """The engine replicas of the rollout's own group (request-level calls go to these only)."""
        return self.group.world_size // self.tensor_parallel_size

    def submit_groups(self, groups: list[GroupRequest], params: SamplingParams, version: int) -> None:
        """Start prompt groups on the replicas each names (every rank gets the list and keeps its replica's)."""
        if groups:
            self.group.call_all("submit_groups", groups, params, version)

    def advance_groups(self, max_steps: int, version: int) -> list[FinishedGroup]:
        """Every replica resumes its parked samples at `version` and steps up to `max_steps` times."""
        return [group for finished in self.group.call_all("advance_groups", max_steps, version) for group in finished]

    def park_groups(self, sleep: bool) -> dict[str, float]:
        """Abort what runs, keeping its tokens; the replicas' request-level rollout/* metrics, pooled."""
        return pool_rollout_metrics([m for m in self.group.call_all("park_groups", sleep) if m])

    def forget_groups(self, group_ids: list[str] | None = None) -> None:
        """Drop these groups (None: all) on every replica, aborting what of them runs."""
        self.group.call_all("forget_groups", group_ids)

    # ------------------------------------------------------------------ borrowed replicas
    def add_replicas(self, groups: dict[int, WorkerGroup]) -> None:
        """Lend these one-rank replica groups (by device) to the rollout, loaded with the actor's current
        weights (one gather for all of them)."""
        if not groups:
            return
        self.borrowed.update(groups)
        self._load_borrowed(list(groups), self.handoff.gather(self.actor))

    def release_replicas(self, devices: list[int]) -> None:
        for device in devices:
            self.borrowed.pop(device).shutdown()

    def replica_phase_metrics(self) -> dict[str, float]:
        """Peaks (and `timing_s/gen_rank`) of the borrowed replicas' ranks since the last call (the own ranks
        report with the run's groups)."""
        return pop_phase_metrics(self.borrowed.values())

    def _drop(self, device: int, why: str) -> None:
        group = self.borrowed.pop(device, None)
        if group is not None:
            group.shutdown()
        log.warning(f"rollout replica on device {device} returned: {why}; the rollout is on {self.devices}")


class SerializedGroup:
    """A worker group whose calls run one at a time, whichever thread makes them. separate_async generates on a
    thread of its own through the rollout's group while the trainer's thread also calls every group (phase
    metrics, profiling); a local group's pipes carry one call at a time. Other attributes are the group's."""

    def __init__(self, group: WorkerGroup) -> None:
        self._group, self._lock = group, threading.Lock()
        self.role, self.world_size = group.role, group.world_size

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        with self._lock:
            return self._group.call_all(method, *args, **kwargs)

    def call_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._group.call_rank0(method, *args, **kwargs)

    def call_sharded(self, method: str, batch: Batch, **kwargs: Any) -> Batch:
        with self._lock:
            return self._group.call_sharded(method, batch, **kwargs)

    def call_sharded_metrics(self, method: str, batch: Batch, replica_size: int = 1,
                             **kwargs: Any) -> dict[str, float]:
        with self._lock:
            return self._group.call_sharded_metrics(method, batch, replica_size, **kwargs)

    def call_per_replica(self, method: str, batch: Batch, replica_size: int, rows_per_row: int = 1,
                         **kwargs: Any) -> Batch:
        with self._lock:
            return self._group.call_per_replica(method, batch, replica_size, rows_per_row, **kwargs)

    def shutdown(self) -> None:
        with self._lock:
            self._group.shutdown()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)


def _split(num_rows: int, ranks: list[int]) -> list[tuple[int, int]]:
    """Contiguous [start, end) row ranges, proportional to each part's number of ranks."""
    total, bounds, before = sum(ranks), [], 0
    for count in ranks:
        bounds.append((num_rows * before // total, num_rows * (before + count) // total))
        before += count
    return bounds


def _with_fields(rows: Batch) -> bool:
    """Agent-loop rows travel to the ranks with their non-tensor fields (messages, tools_kwargs, ...)."""
    return bool(rows.meta.get(AGENT_LOOP_META))


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [""])[0]
