"""The `WorkerGroup` seam (all ranks, rank 0, or sharded by data-parallel rank) and its world-size-1 form.

Launchers (`LocalWorkerGroup`, `RayWorkerGroup`) implement the same Protocol; the split/pad/concat and
metric-reduction rules live here so every launcher behaves the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from typing_extensions import Self

from hybridrl.utils.batch import Batch
from hybridrl.utils.metrics import reduce_metrics

from .errors import GroupClosedError, WorkerError


@runtime_checkable
class WorkerGroup(Protocol):
    """One role's workers (one per rank), driven by the single controller.

    - `call_all`: every rank runs `method(*args, **kwargs)`; returns the per-rank results in rank order.
    - `call_rank0`: only rank 0 runs it (it must not use collectives); returns its result.
    - `call_sharded`: the batch is split evenly across ranks (padded with copies of its leading rows when
      it does not divide), each rank runs `method(shard, **kwargs)` and returns a `Batch` with as many rows
      as its shard; the outputs are concatenated in rank order and the padding rows are dropped.
    - `call_sharded_metrics`: as `call_sharded`, but each rank returns a `{name: value or [values]}` dict,
      reduced across ranks verl's way (name contains "max" → max, "min" → min, else mean). With `replica_size`
      > 1 every rank of a replica of that many consecutive ranks runs the replica's shard (a role's Ulysses
      sequence-parallel group) and every rank's metrics are pooled.
    - `call_per_replica`: as `call_sharded` over replicas of `replica_size` consecutive ranks (tensor-
      parallel rollout): every rank of a replica runs the replica's shard; the replica's first rank answers,
      with `rows_per_row` consecutive output rows per input row (a prompt's samples).
    """

    role: str
    world_size: int

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]: ...

    def call_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any: ...

    def call_sharded(self, method: str, batch: Batch, **kwargs: Any) -> Batch: ...

    def call_sharded_metrics(self, method: str, batch: Batch, replica_size: int = 1,
                             **kwargs: Any) -> dict[str, float]: ...

    def call_per_replica(self, method: str, batch: Batch, replica_size: int, rows_per_row: int = 1,
                         **kwargs: Any) -> Batch: ...

    def shutdown(self) -> None: ...


def shard_batch(batch: Batch, world_size: int) -> tuple[list[Batch], int]:
    """Split `batch` into `world_size` equal contiguous shards, padding with copies of its leading rows.

    Returns (shards, num_padded); `gather_shards` strips the padding again.
    """
    if len(batch) == 0:
        raise ValueError("cannot shard an empty batch across workers; the batch has 0 rows")
    padded, num_padded = batch.pad_to_multiple(world_size)
    return padded.chunk(world_size), num_padded


def gather_shards(outputs: Sequence[Any], shards: Sequence[Batch], num_padded: int, role: str,
                  method: str, rows_per_row: int = 1) -> Batch:
    """Concatenate per-rank outputs in rank order and drop the padding rows' outputs; each output must have
    `rows_per_row` rows per row of its shard (consecutive: a row's samples, as `Batch.repeat` interleaves)."""
    for rank, (out, shard) in enumerate(zip(outputs, shards)):
        if not isinstance(out, Batch):
            raise TypeError(f"{role}.{method} on rank {rank} returned {type(out).__name__}; call_sharded needs a "
                            f"Batch back (use call_all for other return types)")
        if len(out) != len(shard) * rows_per_row:
            raise ValueError(f"{role}.{method} on rank {rank} returned {len(out)} rows for a shard of {len(shard)}; "
                             f"the call expects {rows_per_row} output row(s) per input row")
    if len(outputs) == 1 and num_padded == 0:  # one rank (a one-process run): nothing to join, no copy
        return outputs[0]
    return Batch.concat(list(outputs)).unpad(num_padded * rows_per_row)


def reduce_rank_metrics(per_rank: Sequence[Mapping[str, Any]], role: str, method: str) -> dict[str, float]:
    """Pool each metric's values over ranks (a rank may return a list per key) and reduce by name."""
    if not per_rank:
        raise ValueError(f"{role}.{method} returned no metrics (no ranks answered)")
    keys = set(per_rank[0])
    pooled: dict[str, list[Any]] = {key: [] for key in per_rank[0]}
    for rank, metrics in enumerate(per_rank):
        if not isinstance(metrics, Mapping):
            raise TypeError(f"{role}.{method} on rank {rank} returned {type(metrics).__name__}; "
                            f"call_sharded_metrics needs a dict of metrics")
        if set(metrics) != keys:
            raise ValueError(f"{role}.{method}: ranks disagree on metric names; rank 0 has {sorted(keys)}, rank "
                             f"{rank} has {sorted(metrics)} (every rank must report the same keys)")
        for key, value in metrics.items():
            pooled[key].extend(value if isinstance(value, (list, tuple)) else [value])
    return reduce_metrics(pooled)


class RankCalls:
    """The three calls (plus sharded metrics) written once over a launcher's `_run`.

    A launcher subclasses this and implements `_run(method, calls)`: send `calls[i]` = (args, kwargs) to
    rank i, return the results in rank order. `role` and `world_size` come from the launcher.
    """

    role: str
    world_size: int

    def _run(self, method: str, calls: list[tuple[tuple, dict[str, Any]]]) -> list[Any]:
        raise NotImplementedError

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self._run(method, [(args, kwargs)] * self.world_size)

    def _in_rank_order(self, method: str, results: dict[int, Any], errors: dict[int, str], ranks) -> list[Any]:
        """The collected results in rank order, or the lowest failing rank's error (its traceback)."""
        if errors:
            rank = min(errors)
            raise WorkerError(self.role, rank, method, errors[rank])
        return [results[r] for r in ranks]

    def call_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._run(method, [(args, kwargs)])[0]

    def call_sharded(self, method: str, batch: Batch, **kwargs: Any) -> Batch:
        shards, num_padded = shard_batch(batch, self.world_size)
        outputs = self._run(method, [((shard,), kwargs) for shard in shards])
        return gather_shards(outputs, shards, num_padded, self.role, method)

    def call_sharded_metrics(self, method: str, batch: Batch, replica_size: int = 1,
                             **kwargs: Any) -> dict[str, float]:
        shards, _ = shard_batch(batch, self._replicas(replica_size))
        calls = [((shards[rank // replica_size],), kwargs) for rank in range(self.world_size)]
        return reduce_rank_metrics(self._run(method, calls), self.role, method)

    def call_per_replica(self, method: str, batch: Batch, replica_size: int, rows_per_row: int = 1,
                         **kwargs: Any) -> Batch:
        shards, num_padded = shard_batch(batch, self._replicas(replica_size))
        outputs = self._run(method, [((shards[rank // replica_size],), kwargs) for rank in range(self.world_size)])
        return gather_shards(outputs[::replica_size], shards, num_padded, self.role, method, rows_per_row)

    def _replicas(self, replica_size: int) -> int:
        if replica_size < 1 or self.world_size % replica_size:
            raise ValueError(f"{self.role}: replicas of {replica_size} ranks do not tile the group's "
                             f"{self.world_size} ranks")
        return self.world_size // replica_size


class InProcessGroup:
    """The world-size-1 group: calls go straight to `worker` in this process (no processes, no pickling).

    Exceptions propagate unchanged (their traceback is already local), unlike the multi-process
    launchers, which wrap them in `WorkerError`.
    """

    def __init__(self, worker: Any, role: str = "worker") -> None:
        self.worker = worker
        self.role = role
        self.world_size = 1
        self._closed = False

    def _method(self, method: str) -> Any:
        if self._closed:
            raise GroupClosedError(f"the {self.role} group was shut down; build a new one to call {method}()")
        fn = getattr(self.worker, method, None)
        if fn is None or not callable(fn):
            raise AttributeError(f"{self.role} worker {type(self.worker).__name__} has no method {method!r}")
        return fn

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return [self._method(method)(*args, **kwargs)]

    def call_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._method(method)(*args, **kwargs)

    def call_sharded(self, method: str, batch: Batch, **kwargs: Any) -> Batch:
        out = self._method(method)(batch, **kwargs)
        return gather_shards([out], [batch], 0, self.role, method)

    def call_sharded_metrics(self, method: str, batch: Batch, replica_size: int = 1,
                             **kwargs: Any) -> dict[str, float]:
        self._one_replica(replica_size)
        return reduce_rank_metrics([self._method(method)(batch, **kwargs)], self.role, method)

    def call_per_replica(self, method: str, batch: Batch, replica_size: int, rows_per_row: int = 1,
                         **kwargs: Any) -> Batch:
        self._one_replica(replica_size)
        out = self._method(method)(batch, **kwargs)
        return gather_shards([out], [batch], 0, self.role, method, rows_per_row)

    def _one_replica(self, replica_size: int) -> None:
        if replica_size != 1:
            raise ValueError(f"{self.role}: a one-process group has no replicas of {replica_size} ranks")

    def shutdown(self) -> None:
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
