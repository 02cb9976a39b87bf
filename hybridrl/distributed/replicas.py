"""Whole-model replicas on every rank (a role's `fsdp_config.fsdp_size=1`): no FSDP, gradients averaged.

A model whose weights, gradients and optimizer state fit on one device gains nothing from sharding and
pays for it: FSDP2 gathers every layer's weights in each forward and backward, on NCCL kernels that run
beside the compute, and runs per-layer hooks and DTensor optimizer steps on the host. A replica trains
as one process does; the only collective is `average_gradients` before each optimizer step.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
import torch.distributed as dist

BUCKET_BYTES = 256 << 20  # flattened gradients per all-reduce: few collectives, a bounded extra buffer


def average_gradients(params: Iterable[torch.nn.Parameter], reduce_dtype: torch.dtype | None = None,
                      group: dist.ProcessGroup | None = None, bucket_bytes: int = BUCKET_BYTES) -> None:
    """Replace each trainable parameter's gradient by its mean over `group`'s ranks (collective).

    Gradients are flattened into buckets of about `bucket_bytes` and all-reduced in `reduce_dtype` (None: their
    own dtype). A trainable parameter without a gradient on this rank takes part with zeros, so every rank
    sends the same buckets whichever parameters its batch reached.
    """
    world = dist.get_world_size(group)
    trainable = [p for p in params if p.requires_grad]
    if world == 1 or not trainable:
        return
    for param in trainable:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
    grads = [p.grad for p in trainable]
    for bucket in _buckets(grads, reduce_dtype, bucket_bytes):
        flat = torch.cat([g.reshape(-1).to(reduce_dtype or g.dtype) for g in bucket])
        dist.all_reduce(flat, group=group)  # a sum: gloo has no AVG
        flat.div_(world)
        offset = 0
        for grad in bucket:
            grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
            offset += grad.numel()


def _buckets(grads: list[torch.Tensor], reduce_dtype: torch.dtype | None,
             bucket_bytes: int) -> Iterator[list[torch.Tensor]]:
    """Consecutive gradients of one dtype, about `bucket_bytes` (in the reduce dtype) per bucket."""
    bucket: list[torch.Tensor] = []
    size = 0
    for grad in grads:
        if bucket and (size >= bucket_bytes or grad.dtype != bucket[0].dtype):
            yield bucket
            bucket, size = [], 0
        bucket.append(grad)
        size += grad.numel() * (reduce_dtype or grad.dtype).itemsize
    if bucket:
        yield bucket
