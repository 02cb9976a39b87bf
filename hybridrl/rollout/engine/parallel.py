"""Tensor parallelism inside one engine replica (`actor_rollout_ref.rollout.tensor_model_parallel_size`).

Megatron's split, as vLLM does it: the fused qkv and gate/up projections are column-parallel (each rank
holds its heads' and its intermediate slice's rows), o_proj and down_proj are row-parallel (each rank
multiplies the slice of the input its column-parallel partner produced, then one all-reduce sums the
partial outputs). Embeddings, norms and the LM head stay whole on every rank, so every rank computes the
same logits and samples the same tokens (sampling noise is keyed by row and step): the ranks' schedulers
make the same decisions with no further communication. Each rank's KV cache holds its own KV heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"


@dataclass(frozen=True)
class TensorParallel:
    """This rank's place in its replica's tensor-parallel group; size 1 (the default) is no parallelism."""

    rank: int = 0
    size: int = 1
    group: Any = None  # a torch.distributed process group when size > 1

    def shard(self, full: int, what: str) -> int:
        """`full` split evenly over the ranks; an error naming the key when it does not divide."""
        if full % self.size:
            raise ValueError(f"{what} ({full}) does not divide by {TP_KEY} ({self.size}); use a size that divides "
                             "the model's attention heads, KV heads and MLP width (or 1)")
        return full // self.size

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.size > 1:
            torch.distributed.all_reduce(x, group=self.group)
        return x


SINGLE = TensorParallel()


def rank_slice(full: torch.Tensor, tp: TensorParallel, dim: int, slices: int | None = None) -> torch.Tensor:
    """This rank's part of `full` along `dim` cut into `slices` (default tp) equal parts; with fewer slices
    than ranks (KV heads replicated over ranks) consecutive ranks share a slice."""
    slices = slices or tp.size
    size = full.shape[dim] // slices
    return full.narrow(dim, tp.rank * slices // tp.size * size, size)


def kv_head_slices(num_kv_heads: int, tp: TensorParallel) -> int:
    """How many ways the KV heads split: tp when they divide by it; with fewer KV heads than ranks each
    rank keeps one head, shared by tp / num_kv_heads ranks (as vLLM does); anything else is an error."""
    slices = min(tp.size, num_kv_heads)
    if num_kv_heads % slices or tp.size % slices:
        raise ValueError(f"num_key_value_heads ({num_kv_heads}) and {TP_KEY} ({tp.size}) must divide one another "
                         "(each rank holds whole KV heads); choose a size that divides the KV heads or a multiple")
    return slices


class RowParallelLinear(nn.Module):
    """y = x W^T + b with W's input dimension split over the ranks: each rank holds W[:, its slice], its
    partial product is all-reduced, the bias is added once after. With one rank: `F.linear`."""

    def __init__(self, in_features: int, out_features: int, bias: bool, tp: TensorParallel = SINGLE,
                 what: str = "in_features") -> None:
        super().__init__()
        self.tp = tp
        self.weight = nn.Parameter(torch.empty(out_features, tp.shard(in_features, what)))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.weight.weight_loader = self._load_weight

    def _load_weight(self, param: torch.Tensor, loaded: torch.Tensor, shard_id: object = None) -> None:
        from hybridrl.rollout.engine.layers import default_weight_loader

        default_weight_loader(param, rank_slice(loaded, self.tp, 1) if self.tp.size > 1 else loaded)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return F.linear(x, self.weight, self.bias)
        y = self.tp.all_reduce(F.linear(x, self.weight))
        return y + self.bias if self.bias is not None else y


def replica_groups(size: int) -> TensorParallel:
    """This rank's place when the current torch.distributed world is cut into tensor-parallel replicas of
    `size` consecutive ranks. Collective: every rank creates every replica's process group."""
    if size == 1:
        return SINGLE
    world, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
    if size < 1 or world % size:
        raise ValueError(f"{TP_KEY}={size} does not divide the {world} rollout ranks; use a divisor of {world}")
    groups = [torch.distributed.new_group(list(range(start, start + size))) for start in range(0, world, size)]
    return TensorParallel(rank % size, size, groups[rank // size])
