"""Whole-model replicas on every rank (a role's `fsdp_config.fsdp_size=1`): no FSDP, gradients averaged.

A model whose weights, gradients and optimizer state fit on one device gains nothing from sharding and
pays for it: FSDP2 gathers every layer's weights in each forward and backward, on NCCL kernels that run
beside the compute, and runs per-layer hooks and DTensor optimizer steps on the host. A replica trains
as one process does; the only collectives are the gradient all-reduces of `GradientAverager`, which start
while the last backward still runs (as DDP's buckets do).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

BUCKET_BYTES = 256 << 20  # flattened gradients per all-reduce: few collectives, a bounded extra buffer
MAX_IN_FLIGHT = 4  # buckets reducing at once; older ones are written back first (bounds the extra memory)


class GradientAverager:
    """Replaces each trainable parameter's gradient by its mean over `group`'s ranks (collective).

    Parameters are bucketed in reverse order (about the order backward completes them), about
    `bucket_bytes` per bucket, one dtype per bucket. Around the backward that completes the gradients (the
    last micro-batch's), `overlapping()` starts each bucket's all-reduce once its last gradient has been
    accumulated, always in bucket order, so every rank issues the same collectives in the same order. `finish()`
    reduces the buckets backward did not complete (a parameter it never reached takes part with zeros) and
    writes every mean back into `.grad`. Buckets are all-reduced in `reduce_dtype` (None: their own dtype).
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], reduce_dtype: torch.dtype | None = None,
                 group: dist.ProcessGroup | None = None, bucket_bytes: int = BUCKET_BYTES) -> None:
        self.group, self.reduce_dtype = group, reduce_dtype
        self.world = dist.get_world_size(group)
        params = [p for p in params if p.requires_grad][::-1]
        self.buckets = list(_buckets(params, reduce_dtype, bucket_bytes))
        self._bucket_of = {id(p): i for i, bucket in enumerate(self.buckets) for p in bucket}
        self._reset()

    def _reset(self) -> None:
        self._missing = [len(bucket) for bucket in self.buckets]
        self._next = 0  # the first bucket not launched yet
        self._in_flight: list[tuple[int, torch.Tensor, dist.Work]] = []  # (bucket, flat sum, its all-reduce)

    @property
    def launched(self) -> int:
        """Buckets whose all-reduce has started since the last `finish()`."""
        return self._next

    @contextmanager
    def overlapping(self, active: bool = True) -> Iterator[None]:
        """Launch buckets from the gradient hooks while the backward inside runs (`active`: else nothing)."""
        if not active or self.world == 1:
            yield
            return
        self._reset()  # a backward that raised midway (out of memory) left launched buckets behind
        hooks = [p.register_post_accumulate_grad_hook(self._accumulated) for bucket in self.buckets for p in bucket]
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def finish(self) -> None:
        """Launch the remaining buckets, then write every bucket's mean back into the gradients."""
        if self.world > 1:
            while self._next < len(self.buckets):
                self._launch()
            while self._in_flight:
                self._write_back()
        self._reset()

    def _accumulated(self, param: torch.Tensor) -> None:
        index = self._bucket_of[id(param)]
        if index < self._next:  # its bucket is already reducing: the mean would miss this contribution
            raise RuntimeError(f"a gradient of shape {tuple(param.shape)} was accumulated twice in one backward, after "
                               "its bucket's all-reduce had started; this model cannot overlap the gradient "
                               "all-reduce: set the role's fsdp_config.fsdp_size=-1 (FSDP2) instead of 1")
        self._missing[index] -= 1
        while self._next < len(self.buckets) and self._missing[self._next] == 0:
            self._launch()

    def _launch(self) -> None:
        index, bucket = self._next, self.buckets[self._next]
        self._next += 1
        for param in bucket:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        flat = torch.cat([p.grad.reshape(-1).to(self.reduce_dtype or p.dtype) for p in bucket])
        work = dist.all_reduce(flat, group=self.group, async_op=True)  # a sum: gloo has no AVG
        self._in_flight.append((index, flat, work))
        if len(self._in_flight) > MAX_IN_FLIGHT:
            self._write_back()

    def _write_back(self) -> None:
        index, flat, work = self._in_flight.pop(0)
        work.wait()
        flat.div_(self.world)
        offset = 0
        for param in self.buckets[index]:
            param.grad.copy_(flat[offset:offset + param.numel()].view_as(param))
            offset += param.numel()


def _buckets(params: list[torch.nn.Parameter], reduce_dtype: torch.dtype | None,
             bucket_bytes: int) -> Iterator[list[torch.nn.Parameter]]:
    """Consecutive parameters of one dtype, about `bucket_bytes` (in the reduce dtype) per bucket."""
    bucket: list[torch.nn.Parameter] = []
    size = 0
    for param in params:
        if bucket and (size >= bucket_bytes or param.dtype != bucket[0].dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append(param)
        size += param.numel() * (reduce_dtype or param.dtype).itemsize
    if bucket:
        yield bucket
