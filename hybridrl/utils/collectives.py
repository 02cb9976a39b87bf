"""Process-group helpers: one integer agreed on by every rank (a scalar all-reduce on the group's device), and
which process logs what concerns every rank alike."""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_reduce_int(value: int, op: dist.ReduceOp, group: dist.ProcessGroup | None = None) -> int:
    """`value` reduced with `op` (MIN, MAX, SUM) over `group` (None: the default group); collective."""
    device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=op, group=group)
    return int(tensor.item())


def rank_and_world_size() -> tuple[int, int]:
    """This process's place in its worker group: torch.distributed's, or (0, 1) outside one (one process)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_rank0() -> bool:
    """One process, or rank 0 of a worker group: where a line about a role as a whole (its precision, its
    layout, its compilation) is logged, once rather than once per rank."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
