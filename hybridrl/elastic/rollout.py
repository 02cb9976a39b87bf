"""Elastic rollout: extend generation onto more devices at runtime (and give them back), between steps.

A borrowed device gets a one-rank group hosting only a rollout replica (`workers.launch.start_rollout_replica`:
on CPU a spawned process, on GPU a rank pinned to that device), lent to the run's rollout: it becomes an
extra group inside it (`workers.rollout_group.GroupRollout`), loaded with the actor's current weights the
way a rollout on other ranks is synced, and the prompts are split over all of them so that the samples are
those of a run that never changed. Requests (`control.Request`) are applied by the trainer at step
boundaries only; a request that cannot be satisfied is refused with a logged reason and training goes on.
Borrowed replicas hold no training state: checkpoints do not mention them and resume on the original
placement.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from hybridrl.config.run_plan import RunPlan
from hybridrl.config.schema import HybridRLConfig
from hybridrl.distributed import WorkerGroup
from hybridrl.logging.log import get_logger
from hybridrl.elastic.control import Request
from hybridrl.workers.protocols import RolloutRole

log = get_logger("hybridrl.elastic")


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


class RolloutElasticity:
    """Applies grow and shrink requests to the run's rollout at step boundaries: borrowed devices become one-rank
    replica groups inside the rollout (`RolloutRole.add_replicas`); a request that cannot be satisfied is
    refused with a logged reason and training goes on."""

    def __init__(self, rollout: RolloutRole, placement: ElasticPlacement,
                 start_replica: Callable[[int], WorkerGroup]) -> None:
        self.rollout, self.placement = rollout, placement
        self._start_replica = start_replica

    def apply(self, request: Request) -> None:
        """Grow or shrink now (a step boundary)."""
        if request.action == "grow":
            self.grow(request.devices, source=request.source)
        else:
            self.shrink(request.devices, source=request.source)

    def grow(self, wanted: tuple[int, ...] | None, source: str = "request") -> None:
        borrowed = [d for d in self.rollout.devices if d not in self.placement.rollout]
        devices = grow_devices(self.placement, borrowed, wanted)
        if isinstance(devices, str):
            log.warning(f"rollout grow request ({source}) refused: {devices}; training goes on")
            return
        log.info(f"growing the rollout onto {self.placement.device_type} device(s) {devices} ({source})")
        with ThreadPoolExecutor(max_workers=len(devices)) as pool:
            starting = {d: pool.submit(self._start_replica, d) for d in devices}
        started: dict[int, WorkerGroup] = {}
        for device, future in starting.items():
            try:
                started[device] = future.result()
            except Exception as err:  # noqa: BLE001 - a replica that cannot start is a refusal, not a crash
                log.warning(f"rollout replica on device {device} could not start ({type(err).__name__}: "
                            f"{_first_line(err)}); it is left out")
        self.rollout.add_replicas(started)
        if any(d in self.rollout.devices for d in started):
            log.info(f"rollout grown to {len(self.rollout.devices)} devices: {self.rollout.devices}")

    def shrink(self, wanted: tuple[int, ...] | None, source: str = "request") -> None:
        borrowed = [d for d in self.rollout.devices if d not in self.placement.rollout]
        devices = borrowed if wanted is None else list(dict.fromkeys(wanted))
        not_borrowed = [d for d in devices if d not in borrowed]
        reason = ("nothing borrowed to return" if not borrowed else
                  f"devices {not_borrowed} are not borrowed (borrowed: {borrowed}; the rollout's own "
                  f"{list(self.placement.rollout)} are never returned)" if not_borrowed else None)
        if reason:
            log.warning(f"rollout shrink request ({source}) refused: {reason}; training goes on")
            return
        self.rollout.release_replicas(devices)
        now = self.rollout.devices
        log.info(f"rollout shrunk to {len(now)} device{'s' if len(now) != 1 else ''}: {now} (returned {devices}; "
                 f"{source})")

    def close(self) -> None:
        """Return every borrowed device (the run ends)."""
        self.rollout.release_replicas([d for d in self.rollout.devices if d not in self.placement.rollout])


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [""])[0]


def make_elasticity(cfg: HybridRLConfig, plan: RunPlan, rollout: RolloutRole, total_steps: int) -> RolloutElasticity:
    """Replicas start on the local launcher with the run's config."""
    from hybridrl.workers.launch import start_rollout_replica

    def start(device_id: int) -> WorkerGroup:
        return start_rollout_replica(cfg, plan, device_id, total_steps=total_steps)

    return RolloutElasticity(rollout, placement_of(plan), start)
