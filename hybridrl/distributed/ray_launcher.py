"""The Ray launcher (multi-node): resource pools of placement-group bundles, one Ray actor per rank.

Same `WorkerGroup` interface and worker classes as the local launcher. The only module that imports
ray (lazily: the hints work without it; `launcher_choice` picks the launcher). Ranks may run on other nodes, which a
shared-memory buffer does not reach: with this launcher the actor's weights reach a rollout on other
ranks pickled through Ray's object store (`distributed/weight_sync.py`, `HANDOFF_BY_LAUNCHER`).
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import Self

from hybridrl.logging.backends import MissingDependencyError
from hybridrl.logging.log import get_logger

from .errors import (
    GroupClosedError,
    PlacementError,
    RayInitError,
    WorkerDiedError,
    WorkerError,
)
from .worker_group import RankCalls

logger = get_logger("distributed.ray")


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingDependencyError("the Ray launcher (trainer.launcher=ray, a Ray address or several nodes) needs "
                                     "ray, which is not installed: pip install 'hybridrl[ray]'") from None
    return ray


# ---------------------------------------------------------------- ray.init with hints
def _ray_cluster_file() -> str:
    return os.path.join(os.environ.get("RAY_TMPDIR", "/tmp"), "ray", "ray_current_cluster")


def init_failure_hint(address: str | None, error: BaseException, local_cluster_running: bool) -> str:
    """The message for a failed ray.init: what was tried, the root cause (Ray wraps it) and the likely fix."""
    reason = _with_root_cause(error)
    if _is_authentication_failure(error):
        cluster = f"the Ray cluster at {address!r}" if address not in (None, "", "auto", "local") else "the Ray cluster"
        return f"could not connect to {cluster}: {reason}. {_AUTHENTICATION_FIX}"
    if address and address not in ("auto", "local"):
        return (f"could not connect to the Ray cluster at {address!r} (ray_kwargs.ray_init.address or RAY_ADDRESS): "
                f"{reason}. Start the head node there with `ray start --head`, or check the address (the head's "
                f"host:port, printed by `ray start --head` and `ray status`); unset it to start a local Ray instance")
    if address == "auto":
        return (f"ray_kwargs.ray_init.address=auto but no running Ray cluster was found ({reason}); start one with "
                f"`ray start --head`, or unset the address to start a local Ray instance")
    if local_cluster_running:
        return (f"ray.init failed ({reason}); a Ray cluster seems to be running already: try `ray stop`, or set "
                f"ray_kwargs.ray_init.address=auto to join it")
    return f"ray.init failed: {reason}"


_AUTHENTICATION_FIX = ("The cluster requires authentication: set the same token and auth mode as the cluster in this "
                       "environment (e.g. RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN or "
                       "~/.ray/auth_token)")
_AUTH_TOKEN_MENTION = re.compile(r"auth(?:entication)?[ _-]?token|RAY_AUTH_MODE", re.IGNORECASE)


def _exception_chain(error: BaseException) -> list[BaseException]:
    """`error`, then what caused it, innermost last: `__cause__`, else `__context__` unless hidden (`from None`)."""
    chain = [error]
    while True:
        link = chain[-1]
        inner = link.__cause__ if link.__cause__ is not None else (
            None if link.__suppress_context__ else link.__context__)
        if inner is None or any(inner is seen for seen in chain):
            return chain
        chain.append(inner)


def _is_authentication_failure(error: BaseException) -> bool:
    return any("Authentication" in type(link).__name__ or _AUTH_TOKEN_MENTION.search(str(link))
               for link in _exception_chain(error))


def _with_root_cause(error: BaseException) -> str:
    """`error`'s message, followed by its innermost cause (type and first line) when that is another exception:
    ray.init reports "Failed to connect to Ray cluster" while the reason (e.g. an AuthenticationError) is inside."""
    root = _exception_chain(error)[-1]
    lines = str(root).strip().splitlines()
    cause = f"{type(root).__name__}: {lines[0]}" if lines else type(root).__name__
    if root is error or cause in str(error):
        return str(error)
    return f"{error} (root cause: {cause})"


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # not host:port (e.g. a ray:// client URL): let ray.init judge it
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise RayInitError(init_failure_hint(address, err, False)) from None


def _requested_address(ray_init_kwargs: dict[str, Any]) -> str | None:
    return ray_init_kwargs.get("address") or os.environ.get("RAY_ADDRESS")


def starts_local_ray(ray_init_kwargs: dict[str, Any]) -> bool:
    """Whether `init_ray` would start a Ray instance here (sized by ray_init's num_cpus/num_gpus) rather than
    join a running cluster; False when Ray is already initialised."""
    return not import_ray().is_initialized() and _requested_address(ray_init_kwargs) in (None, "", "local")


def init_ray(ray_init_kwargs: dict[str, Any]) -> None:
    """`ray.init(**ray_init_kwargs)` (verl's `ray_kwargs.ray_init`) with actionable errors; no-op if connected."""
    ray = import_ray()
    if ray.is_initialized():
        logger.info("Ray is already initialised; ray_kwargs.ray_init is not applied again")
        return
    address = _requested_address(ray_init_kwargs)
    if address and address not in ("auto", "local"):
        _check_reachable(address.removeprefix("ray://"))
    try:
        ray.init(**ray_init_kwargs)
    except Exception as err:
        raise RayInitError(init_failure_hint(address, err, os.path.exists(_ray_cluster_file()))) from err


# ---------------------------------------------------------------- resource pools
@dataclass
class RayResourcePool:
    """`world_size` bundles ({"CPU": 1} or {"GPU": 1, "CPU": 1}), one per rank, in one placement group.

    Roles mapped to the same pool share its bundles: each rank's actor takes 1/max_colocate_count of it.
    """

    name: str
    world_size: int
    use_gpu: bool = False
    max_colocate_count: int = 3
    strategy: str = "PACK"
    ready_timeout_s: float = 120.0
    ray_started_here: bool = False  # by hybridrl (ray_kwargs.ray_init sizes it), not a cluster it joined
    _placement_group: Any = field(default=None, repr=False)

    def bundle(self) -> dict[str, float]:
        return {"GPU": 1.0, "CPU": 1.0} if self.use_gpu else {"CPU": 1.0}

    def placement_group(self) -> Any:
        """The pool's placement group, created (and waited for) on first use."""
        if self._placement_group is None:
            ray = import_ray()
            from ray.util.placement_group import placement_group

            self._check_capacity(ray.cluster_resources())
            pg = placement_group([self.bundle()] * self.world_size, strategy=self.strategy, name=f"hybridrl-{self.name}")
            if not pg.wait(self.ready_timeout_s):
                ray.util.remove_placement_group(pg)
                raise PlacementError(f"Ray could not place pool {self.name!r} ({self.world_size} x {self.bundle()}, "
                                     f"strategy {self.strategy}) within {self.ready_timeout_s:.0f}s "
                                     f"(trainer.ray_wait_register_center_timeout); cluster has "
                                     f"{ray.available_resources()} free. STRICT_PACK needs one node with all of it")
            self._placement_group = pg
        return self._placement_group

    def _check_capacity(self, cluster: dict[str, float]) -> None:
        for resource, amount in self.bundle().items():
            needed = amount * self.world_size
            if cluster.get(resource, 0.0) < needed:
                raise PlacementError(f"pool {self.name!r} needs {needed:g} {resource} ({self.world_size} ranks) but "
                                     f"the Ray cluster has {cluster.get(resource, 0.0):g}; "
                                     f"{self._capacity_fix(resource, needed)}")

    def _capacity_fix(self, resource: str, needed: float) -> str:
        fewer_ranks = "run fewer ranks (trainer.n_gpus_per_node x trainer.nnodes)"
        if resource == "CPU" and self.ray_started_here:  # a CPU rank is a process: the cores may be shared
            return (f"set ray_kwargs.ray_init.num_cpus={needed:g} for the Ray instance hybridrl starts (CPU ranks "
                    f"may share the cores), or {fewer_ranks}")
        return f"{fewer_ranks} or add {resource}s to the cluster (more nodes)"

    def remove(self) -> None:
        if self._placement_group is not None:
            import_ray().util.remove_placement_group(self._placement_group)
            self._placement_group = None


class ResourcePoolManager:
    """Named pools and the role → pool mapping (verl: `{"global_pool": [n_gpus] * nnodes}`, all roles on it)."""

    def __init__(self, pool_sizes: dict[str, int], role_to_pool: dict[str, str], *, use_gpu: bool,
                 strategy: str = "PACK", ready_timeout_s: float = 120.0, ray_started_here: bool = False) -> None:
        unknown = {role: pool for role, pool in role_to_pool.items() if pool not in pool_sizes}
        if unknown:
            raise PlacementError(f"roles mapped to undefined pools {unknown}; defined pools: {sorted(pool_sizes)}")
        self.pools = {name: RayResourcePool(name, size, use_gpu=use_gpu, strategy=strategy,
                                            ready_timeout_s=ready_timeout_s, ray_started_here=ray_started_here)
                      for name, size in pool_sizes.items()}
        self.role_to_pool = dict(role_to_pool)

    def pool(self, role: str) -> RayResourcePool:
        if role not in self.role_to_pool:
            raise PlacementError(f"role {role!r} has no resource pool; mapped roles: {sorted(self.role_to_pool)}")
        return self.pools[self.role_to_pool[role]]

    def shutdown(self) -> None:
        for pool in self.pools.values():
            pool.remove()


# ---------------------------------------------------------------- the actors and the group
class _RankActor:
    """One rank inside a Ray actor process (wrapped by `ray.remote` when a group is built)."""

    def __init__(self, factory: Callable[..., Any], init_kwargs: dict[str, Any], rank: int, world_size: int,
                 role: str = "worker") -> None:
        self.factory, self.init_kwargs, self.rank, self.world_size = factory, init_kwargs, rank, world_size
        self.role = role
        self.worker: Any = None

    def __repr__(self) -> str:
        """Ray prefixes the actor's forwarded output with this: `(actor_rollout rank 0 pid=...)`, as the
        local launcher's `(actor_rollout rank 0)`, not `(_RankActor pid=...)`."""
        return f"{self.role} rank {self.rank}"

    def address(self) -> tuple[str, int]:
        from .local_launcher import find_free_port

        ip = import_ray().util.get_node_ip_address()
        return ip, find_free_port(ip)

    def setup(self, master_addr: str, master_port: int, backend: str, env: dict[str, str]) -> tuple[str, Any]:
        """Join the process group and build the worker: ("ok", pid) or ("error", traceback)."""
        import traceback

        from . import rank_runtime as rt

        device = os.environ.get("CUDA_VISIBLE_DEVICES") if backend == "nccl" else None  # the GPU Ray assigned
        try:
            rt.setup_torch_distributed(rank=self.rank, world_size=self.world_size, master_addr=master_addr,
                                       master_port=master_port, backend=backend, device=device, env=env)
            self.worker = rt.build_worker(self.factory, self.init_kwargs)
        except BaseException:  # noqa: BLE001 - reported to the controller as WorkerError
            return "error", traceback.format_exc()
        return "ok", os.getpid()

    def execute(self, method: str, args: tuple, kwargs: dict[str, Any]) -> tuple[str, Any]:
        from .rank_runtime import call_method

        return call_method(self.worker, method, args, kwargs)

    def teardown(self) -> None:
        from .rank_runtime import teardown_torch_distributed

        teardown_torch_distributed()


class RayWorkerGroup(RankCalls):
    """One Ray actor per bundle of `pool` running `worker_factory(**init_kwargs)`, in one process group.

    Not thread-safe: one call at a time. `error_grace_s` as in `LocalWorkerGroup`.
    """

    error_grace_s: float = 10.0

    def __init__(self, worker_factory: Callable[..., Any], init_kwargs: dict[str, Any], *, pool: RayResourcePool,
                 role: str, backend: str | None = None, env: dict[str, str] | None = None) -> None:
        ray = import_ray()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.role, self.world_size = role, pool.world_size
        self.backend = backend or ("nccl" if pool.use_gpu else "gloo")
        self._closed_reason: str | None = None
        share = 1.0 / pool.max_colocate_count
        pg = pool.placement_group()
        actor_cls = ray.remote(_RankActor)
        self._actors = [
            actor_cls.options(num_cpus=share, num_gpus=share if pool.use_gpu else 0,
                              scheduling_strategy=PlacementGroupSchedulingStrategy(
                                  placement_group=pg, placement_group_bundle_index=rank),
                              ).remote(worker_factory, dict(init_kwargs), rank, self.world_size, role)
            for rank in range(self.world_size)
        ]
        try:
            self.master_addr, self.master_port = ray.get(self._actors[0].address.remote())
            refs = [a.setup.remote(self.master_addr, self.master_port, self.backend, dict(env or {}))
                    for a in self._actors]
            self.pids: list[int] = self._collect("__init__", refs)
        except BaseException:
            self._abort("start-up failed")
            raise
        logger.info("%s: %d Ray actor(s) up in pool %r (backend %s, %s:%d)", role, self.world_size, pool.name,
                    self.backend, self.master_addr, self.master_port)

    def _run(self, method: str, calls: list[tuple[tuple, dict[str, Any]]]) -> list[Any]:
        if self._closed_reason is not None:
            raise GroupClosedError(f"the {self.role} worker group is shut down ({self._closed_reason}); "
                                   f"cannot call {method}(); build a new group")
        refs = [actor.execute.remote(method, args, kwargs) for actor, (args, kwargs) in zip(self._actors, calls)]
        try:
            return self._collect(method, refs)
        except KeyboardInterrupt:  # replies still in flight would answer the next call: stop the group
            self._abort(f"interrupted during {method}()")
            raise

    def _collect(self, method: str, refs: list[Any]) -> list[Any]:
        """Results in rank order; WorkerError (lowest failing rank) or WorkerDiedError as in LocalWorkerGroup."""
        ray = import_ray()
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        results: dict[int, Any] = {}
        errors: dict[int, str] = {}
        deadline: float | None = None
        while rank_of:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(rank_of), num_returns=1, timeout=timeout)
            if not ready:
                rank = min(errors)
                self._abort(f"rank {rank} failed in {method}()")
                raise WorkerError(self.role, rank, method, errors[rank],
                                  note=f"ranks {sorted(rank_of.values())} did not answer within "
                                       f"{self.error_grace_s:.0f}s afterwards, so the group was shut down")
            rank = rank_of.pop(ready[0])
            try:
                status, payload = ray.get(ready[0])
            except ray.exceptions.RayActorError as err:
                self._abort(f"rank {rank} died in {method}()")
                cause = (f"its Ray actor died (Ray forwards the actor's output to this console; full logs under "
                         f"/tmp/ray/session_latest/logs). Ray says: {str(err)[-3000:]}")
                raise WorkerDiedError(self.role, rank, method, cause) from None
            except ray.exceptions.RayTaskError as err:  # e.g. the arguments failed to unpickle in the actor
                status, payload = "error", str(err)
            (results if status == "ok" else errors)[rank] = payload
            if errors and deadline is None:
                deadline = time.monotonic() + self.error_grace_s
        return self._in_rank_order(method, results, errors, range(len(refs)))

    def _abort(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        ray = import_ray()
        for actor in self._actors:
            ray.kill(actor)

    def shutdown(self) -> None:
        """Tear down each rank's process group, then kill the actors."""
        if self._closed_reason is not None:
            return
        ray = import_ray()
        refs = [actor.teardown.remote() for actor in self._actors]
        ray.wait(refs, num_returns=len(refs), timeout=10.0)
        self._abort("shutdown() was called")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
