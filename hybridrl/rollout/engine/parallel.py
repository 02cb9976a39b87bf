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

from hybridrl.utils.collectives import all_reduce_int

TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"


@dataclass(frozen=True)
class TensorParallel:
    """This rank's place in its replica's tensor-parallel group; size 1 (the default) is no parallelism."""

    rank: int = 0
    size: int = 1
    group: Any = None  # a torch.distributed process group when size > 1

    def shard(self, full: int, what: str, ways: int | None = None) -> int:
        """`full` split evenly `ways` ways (default: over the ranks); an error naming the key when it does
        not divide."""
        ways = ways or self.size
        if full % ways:
            raise ValueError(f"{what} ({full}) does not divide by {TP_KEY} ({self.size}); use a size that divides "
                             "the model's attention heads, KV heads and MLP width (or 1)")
        return full // ways

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.size > 1:
            torch.distributed.all_reduce(x, group=self.group)
        return x

    def agree_min(self, value: int) -> int:
        """The smallest `value` over the replica's ranks (each measures its own device's free memory; their
        schedulers must see the same KV cache size)."""
        if self.size == 1:
            return value
        return all_reduce_int(value, torch.distributed.ReduceOp.MIN, self.group)


SINGLE = TensorParallel()


def rank_slice(full: torch.Tensor, tp: TensorParallel, dim: int, slices: int | None = None) -> torch.Tensor:
    """This rank's part of `full` along `dim` cut into `slices` (default tp) equal parts; with fewer slices
    than ranks (KV heads replicated over ranks) consecutive ranks share a slice."""
    slices = slices or tp.size
    if slices == 1:
        return full
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
