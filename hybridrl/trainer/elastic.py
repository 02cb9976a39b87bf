"""Elastic rollout: extend generation onto more devices at runtime (and give them back), between steps.

`ElasticRollout` wraps the run's rollout (in-process, or a `GroupRollout` over worker ranks) and exposes
the same interface. Borrowed devices each get a one-rank group hosting only a rollout replica
(`group_roles.start_rollout_replica`: on CPU a spawned process, on GPU a rank pinned to that device),
loaded with the actor's current weights the way a rollout on other ranks is synced. While replicas are
borrowed, `generate_sequences` repeats the prompts n times, numbers the rows and splits them into
contiguous slices, one per rollout rank (own and borrowed), each keyed by its global rows
(`SamplingParams.row_offset`): with `rollout.name=hybrid` the samples, and so the training, are those of
a run that never changed (the hf backend draws one stream per call, so its samples change with the
split). Requests (`control.Request`) are applied by the trainer at step boundaries only; a request that
cannot be satisfied is refused with a logged reason and training goes on. Borrowed replicas hold no
training state: checkpoints do not mention them and resume on the original placement.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import torch

from hybridrl.distributed import (
    GroupClosedError,
    WorkerDiedError,
    WorkerError,
    WorkerGroup,
)
from hybridrl.config.run_plan import RunPlan
from hybridrl.logging.log import get_logger
from hybridrl.rollout import SamplingParams
from hybridrl.trainer.control import Request
from hybridrl.trainer.group_roles import (GroupRollout, generate_on, pool_rollout_metrics, pop_phase_metrics,
                                          pop_rank_metrics)
from hybridrl.trainer.weight_sync import RankWeights, WeightHandoff
from hybridrl.utils.batch import Batch
from hybridrl.workers.colocated import ROW_INDEX_KEY

log = get_logger("hybridrl.trainer")
REPLICA_FAILURES = (WorkerError, WorkerDiedError, GroupClosedError)


@dataclass(frozen=True)
class ElasticPlacement:
    """What a request is checked against. On CPU a "device" is a rank id: range(max(cores, ranks))."""

    device_type: str
    num_visible: int
    rollout: tuple[int, ...]  # the rollout's own devices (never returned)
    actor: tuple[int, ...]  # the default growth: the rollout then time-shares them with training
    critic_only: tuple[int, ...]  # a critic's own devices: rollout and critic never share (placement rules)
    refusal: str | None = None  # why this run cannot grow at all (e.g. the Ray launcher)


def placement_of(plan: RunPlan) -> ElasticPlacement:
    from hybridrl.distributed import num_visible_devices

    visible = num_visible_devices(plan.device)
    refusal = None
    if plan.launcher == "ray":  # also a one-rank Ray run: its replicas would start on this node
        refusal = "growing the rollout needs the local launcher (one node); this run uses Ray"
    rollout, actor = plan.group_of("rollout").device_ids, plan.group_of("actor").device_ids
    critic = plan.group_of("critic").device_ids if plan.hosts("critic") else ()
    num_visible = max(visible, plan.world_size) if plan.device == "cpu" else max(visible, 1)
    return ElasticPlacement(plan.device, num_visible, rollout, actor,
                            tuple(d for d in critic if d not in actor and d not in rollout), refusal)


def grow_devices(placement: ElasticPlacement, borrowed: list[int], wanted: tuple[int, ...] | None) -> list[int] | str:
    """The devices to add, or the reason the request is refused."""
    if placement.refusal:
        return placement.refusal
    used = set(placement.rollout) | set(borrowed)
    if wanted is None:
        free = [d for d in placement.actor if d not in used]
        if not free:
            return (f"no devices left to grow onto: the actor's devices {list(placement.actor)} are already used by "
                    f"the rollout; name free ones, e.g. `hybridrl control <run_dir> grow-rollout --devices "
                    f"{_suggest(placement, used)}`")
        return free
    wanted_list = list(dict.fromkeys(wanted))
    bad = [d for d in wanted_list if not 0 <= d < placement.num_visible]
    if bad:
        kind = "rank ids (CPU)" if placement.device_type == "cpu" else "GPUs"
        return f"devices {bad} out of range: {placement.num_visible} {kind} visible, ids 0..{placement.num_visible - 1}"
    taken = [d for d in wanted_list if d in used]
    if taken:
        return f"devices {taken} are already used by the rollout (now on {sorted(used)})"
    critic = [d for d in wanted_list if d in placement.critic_only]
    if critic:
        return f"devices {critic} are the critic's; the rollout and the critic never share devices"
    return wanted_list


def _suggest(placement: ElasticPlacement, used: set[int]) -> str:
    free = [d for d in range(placement.num_visible) if d not in used and d not in placement.critic_only]
    return ",".join(map(str, free[:2])) or "<id>"


class ElasticRollout:
    """The trainer's rollout plus borrowed replicas; anything else is looked up on the wrapped rollout."""

    def __init__(self, base, placement: ElasticPlacement, start_replica: Callable[[int], WorkerGroup],
                 current_weights: Callable[[], object], handoff: WeightHandoff | None = None):
        """`handoff`: how the actor's weights reach the replicas (the run's, shared with a `GroupRollout`
        base so one gather serves all); None: pickled, as trained (in-process groups, tests)."""
        self.base = base
        self.placement = placement
        self.replicas: dict[int, WorkerGroup] = {}  # borrowed device -> its one-rank rollout group
        self._start_replica = start_replica
        self._current_weights = current_weights
        self.handoff = handoff if handoff is not None else WeightHandoff("pickle", None)

    def __getattr__(self, name: str):
        if name == "base":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)

    @property
    def devices(self) -> list[int]:
        return list(self.placement.rollout) + list(self.replicas)

    # ------------------------------------------------------------------ the rollout interface
    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        if not self.replicas:
            return self.base.generate_sequences(prompts, params)
        rows = prompts.repeat(params.n, interleave=True)  # the row order one process produces
        params = replace(params, n=1)
        parts: list[tuple[int | None, int]] = [(None, len(self.placement.rollout))]  # (borrowed device, ranks)
        parts += [(device, group.world_size) for device, group in self.replicas.items()]
        bounds = _split(len(rows), [ranks for _, ranks in parts])
        jobs = [(device, start, end) for (device, _), (start, end) in zip(parts, bounds) if end > start]
        with ThreadPoolExecutor(max_workers=max(len(jobs) - 1, 1)) as pool:
            futures = {device: pool.submit(self._generate_on, device, rows, start, end, params)
                       for device, start, end in jobs if device is not None}
            outputs = {None: self._generate_on(None, rows, *bounds[0], params)} if bounds[0][1] > bounds[0][0] else {}
            for device, future in futures.items():
                try:
                    outputs[device] = future.result()
                except REPLICA_FAILURES as err:
                    self._drop(device, f"it failed while generating ({type(err).__name__}: {_first_line(err)}); "
                                       f"its rows are generated on the remaining devices")
        for device, start, end in jobs:  # a failed replica's slice, redone by the rollout's own ranks
            if device not in outputs:
                outputs[device] = self._generate_on(None, rows, start, end, params)
        batch = Batch.concat([outputs[device][0] for device, _, _ in jobs])
        return batch, pool_rollout_metrics([m for device, _, _ in jobs for m in outputs[device][1]])

    def _generate_on(self, device: int | None, rows: Batch, start: int, end: int,
                     params: SamplingParams) -> tuple[Batch, list[dict[str, float]]]:
        """Rows [start, end) on the rollout's own ranks (device None) or a borrowed replica."""
        shard = rows.index(slice(start, end))
        if device is None and not isinstance(self.base, GroupRollout):  # in process: the offset is the first row
            batch, metrics = self.base.generate_sequences(shard, replace(params, row_offset=start))
            return batch, [metrics]
        group = self.base.group if device is None else self.replicas[device]
        shard[ROW_INDEX_KEY] = torch.arange(start, end)
        batch = generate_on(group, shard, params)
        return batch, pop_rank_metrics(batch)

    def phase_metrics(self) -> dict[str, float]:
        """Peaks (and `timing_s/gen_rank`) of the borrowed replicas' ranks since the last call (the run's own
        ranks report through `RankGroups.phase_metrics`)."""
        return pop_phase_metrics(self.replicas.values())

    def sync_weights(self, named_tensors) -> dict[str, float] | None:
        """The base's sync plus the replicas', from ONE gather of the actor's weights; returns the metrics of
        the handoff (None when nothing left the actor's ranks)."""
        if not self.replicas:
            return self.base.sync_weights(named_tensors)
        if not isinstance(named_tensors, RankWeights):
            named_tensors = list(named_tensors)  # a generator: consumed by the base and by the gathering below
        payload = self.handoff.gather(named_tensors)
        same_ranks = isinstance(named_tensors, RankWeights) and named_tensors.group is getattr(self.base, "group", None)
        self.base.sync_weights(named_tensors if same_ranks or not isinstance(self.base, GroupRollout) else payload)
        self._load(list(self.replicas), payload)
        return self.handoff.metrics()

    def _load(self, devices: list[int], payload) -> None:
        """The same weights (a `WeightHandoff.gather` payload) into each replica, in parallel; a replica that
        fails is returned."""
        with ThreadPoolExecutor(max_workers=max(len(devices), 1)) as pool:
            futures = {d: pool.submit(self.handoff.load, self.replicas[d], payload) for d in devices}
        for device, future in futures.items():
            try:
                future.result()
            except REPLICA_FAILURES as err:
                self._drop(device, f"it failed to load the weights ({type(err).__name__}: {_first_line(err)})")

    # ------------------------------------------------------------------ requests
    def apply(self, request: Request) -> None:
        """Grow or shrink now (a step boundary); a request that cannot be satisfied is refused and logged."""
        if request.action == "grow":
            self.grow(request.devices, source=request.source)
        else:
            self.shrink(request.devices, source=request.source)

    def grow(self, wanted: tuple[int, ...] | None, source: str = "request") -> None:
        devices = grow_devices(self.placement, list(self.replicas), wanted)
        if isinstance(devices, str):
            log.warning(f"rollout grow request ({source}) refused: {devices}; training goes on")
            return
        log.info(f"growing the rollout onto {self.placement.device_type} device(s) {devices} ({source})")
        with ThreadPoolExecutor(max_workers=len(devices)) as pool:
            started = {d: pool.submit(self._start_replica, d) for d in devices}
        for device, future in started.items():
            try:
                self.replicas[device] = future.result()
            except Exception as err:  # noqa: BLE001 - a replica that cannot start is a refusal, not a crash
                log.warning(f"rollout replica on device {device} could not start ({type(err).__name__}: "
                            f"{_first_line(err)}); it is left out")
        new = [d for d in devices if d in self.replicas]
        if new:
            self._load(new, self.handoff.gather(self._current_weights()))
        if any(d in self.replicas for d in new):
            log.info(f"rollout grown to {len(self.devices)} devices: {self.devices}")

    def shrink(self, wanted: tuple[int, ...] | None, source: str = "request") -> None:
        devices = list(self.replicas) if wanted is None else list(dict.fromkeys(wanted))
        not_borrowed = [d for d in devices if d not in self.replicas]
        reason = ("nothing borrowed to return" if not self.replicas else
                  f"devices {not_borrowed} are not borrowed (borrowed: {list(self.replicas)}; the rollout's own "
                  f"{list(self.placement.rollout)} are never returned)" if not_borrowed else None)
        if reason:
            log.warning(f"rollout shrink request ({source}) refused: {reason}; training goes on")
            return
        for device in devices:
            self.replicas.pop(device).shutdown()
        log.info(f"rollout shrunk to {len(self.devices)} device{'s' if len(self.devices) != 1 else ''}: "
                 f"{self.devices} (returned {devices}; {source})")

    def _drop(self, device: int, why: str) -> None:
        group = self.replicas.pop(device, None)
        if group is not None:
            group.shutdown()
        log.warning(f"rollout replica on device {device} returned: {why}; the rollout is on {self.devices}")

    def close(self):
        """Stop every borrowed replica; returns the wrapped rollout."""
        for device in list(self.replicas):
            self.replicas.pop(device).shutdown()
        return self.base


def _split(num_rows: int, ranks: list[int]) -> list[tuple[int, int]]:
    """Contiguous [start, end) row ranges, proportional to each part's number of ranks."""
    total, bounds, before = sum(ranks), [], 0
    for count in ranks:
        bounds.append((num_rows * before // total, num_rows * (before + count) // total))
        before += count
    return bounds


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [""])[0]


def make_elastic_rollout(trainer) -> ElasticRollout:
    """Wrap `trainer.roles.rollout`; replicas start on the local launcher with the trainer's config."""
    from hybridrl.trainer.group_roles import start_rollout_replica

    cfg, device_type = trainer.cfg, trainer.device.type

    def start(device_id: int) -> WorkerGroup:
        return start_rollout_replica(cfg, device_id, device_type, total_steps=trainer.total_steps)

    return ElasticRollout(trainer.roles.rollout, placement_of(trainer.plan), start,
                          lambda: trainer.roles.actor.named_weights(), trainer.roles.handoff)
