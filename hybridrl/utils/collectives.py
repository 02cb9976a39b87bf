"""One integer agreed on by every rank of a process group (a scalar all-reduce on the group's device)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_reduce_int(value: int, op: dist.ReduceOp, group: dist.ProcessGroup | None = None) -> int:
    """`value` reduced with `op` (MIN, MAX, SUM) over `group` (None: the default group); collective."""
    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=op, group=group)
    return int(tensor.item())
