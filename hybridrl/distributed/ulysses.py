"""Ulysses sequence parallelism: the groups and the differentiable collectives.

A role with `ulysses_sequence_parallel_size = sp` > 1 cuts its ranks into groups of `sp` consecutive ranks
(verl's device mesh `(dp, sp)`); the ranks of a group hold the same rows and each forwards one slice of the
sequence. Attention exchanges heads for sequence by an all-to-all (`heads_to_sequence` before, its inverse
after: DeepSpeed-Ulysses), so each rank attends over the whole sequence with `heads / sp` heads; everything
else (embeddings, MLPs, norms, RoPE with the slice's own positions) is per token. The per-response-token
outputs each rank computes for its slice are summed over the group (`sum_over_group`).

Gradients. Every rank of a group then computes the same loss; rank r's parameter gradient holds the part
that flows through its slice, and the role's gradient reduce averages over all `dp * sp` ranks. So
`sum_over_group`'s backward multiplies by `sp` (verl's `grad_scaler`), and the loss weights count each row once
(`workers.loss_scope`): the gradient is then the one a single rank over the whole batch would get.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

_GROUPS: dict[int, "UlyssesGroup"] = {}  # by size: one set of process groups per size, shared by the roles


@dataclass(frozen=True)
class UlyssesGroup:
    """This rank's sequence-parallel group: `size` consecutive ranks, this one the `rank`-th of them."""

    group: dist.ProcessGroup
    rank: int
    size: int


def ulysses_group(size: int) -> UlyssesGroup:
    """This rank's group of `size` consecutive ranks (collective the first time a size is asked for: every rank
    of the world must call it, in the same order)."""
    if size in _GROUPS:
        return _GROUPS[size]
    world, rank = dist.get_world_size(), dist.get_rank()
    if world % size:
        raise ValueError(f"ulysses_sequence_parallel_size={size} must divide the role's {world} ranks")
    mine = None
    for start in range(0, world, size):
        group = dist.new_group(list(range(start, start + size)))  # every rank creates every group
        if start <= rank < start + size:
            mine = UlyssesGroup(group, rank - start, size)
    assert mine is not None
    _GROUPS[size] = mine
    return mine


def _all_to_all(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Chunk i of dim 0 goes to rank i; chunk i of the result came from rank i."""
    x = x.contiguous()
    out = torch.empty_like(x)  # contiguous like x (empty_like of a permuted view would keep its strides)
    dist.all_to_all_single(out, x, group=group)
    return out


def _to_sequence(x: torch.Tensor, sp: UlyssesGroup) -> torch.Tensor:
    """(B, H, T/sp, D) on each rank → (B, H/sp, T, D): this rank's heads over the whole sequence."""
    batch, heads, local, dim = x.shape
    chunks = x.reshape(batch, sp.size, heads // sp.size, local, dim).transpose(0, 1)  # (sp, B, H/sp, T/sp, D)
    received = _all_to_all(chunks, sp.group)  # chunk i: rank i's sequence slice of this rank's heads
    return received.permute(1, 2, 0, 3, 4).reshape(batch, heads // sp.size, sp.size * local, dim)


def _to_heads(x: torch.Tensor, sp: UlyssesGroup) -> torch.Tensor:
    """The inverse: (B, H/sp, T, D) → (B, H, T/sp, D)."""
    batch, heads, length, dim = x.shape
    local = length // sp.size
    chunks = x.reshape(batch, heads, sp.size, local, dim).permute(2, 0, 1, 3, 4)  # (sp, B, H/sp, T/sp, D)
    received = _all_to_all(chunks, sp.group)  # chunk i: rank i's heads of this rank's sequence slice
    return received.transpose(0, 1).reshape(batch, sp.size * heads, local, dim)


class _AllToAll(torch.autograd.Function):
    """One exchange, differentiable: its backward is the inverse exchange."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, sp: UlyssesGroup, to_sequence: bool) -> torch.Tensor:
        ctx.sp, ctx.to_sequence = sp, to_sequence
        return _to_sequence(x, sp) if to_sequence else _to_heads(x, sp)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (_to_heads(grad, ctx.sp) if ctx.to_sequence else _to_sequence(grad, ctx.sp)), None, None


def heads_to_sequence(x: torch.Tensor, sp: UlyssesGroup) -> torch.Tensor:
    """(B, H, T/sp, D) → (B, H/sp, T, D), differentiable (backward: the inverse all-to-all)."""
    return _AllToAll.apply(x, sp, True)


def sequence_to_heads(x: torch.Tensor, sp: UlyssesGroup) -> torch.Tensor:
    """(B, H/sp, T, D) → (B, H, T/sp, D), differentiable."""
    return _AllToAll.apply(x, sp, False)


class _SumOverGroup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, sp: UlyssesGroup) -> torch.Tensor:
        ctx.size = sp.size
        out = x.clone()
        dist.all_reduce(out, group=sp.group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.size, None  # every rank's loss is the same: see the module docstring


def sum_over_group(x: torch.Tensor, sp: UlyssesGroup) -> torch.Tensor:
    """The sum of `x` over the group's ranks, each of which filled in its own entries (zeros elsewhere).
    Backward: the gradient times the group size, which the average over `dp * sp` ranks then undoes."""
    return _SumOverGroup.apply(x, sp)
