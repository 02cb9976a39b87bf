"""What each micro-batch's loss is multiplied by before its backward (`loss_agg_scope`).

- `mini_batch` (default): the mean the loss_agg_mode names runs over the whole mini-batch, every micro-batch
  and rank of it: micro-batch i's loss is weighted by its share of the mini-batch's tokens (token-mean) or
  sequences (seq modes), counted over all ranks with one small all-reduce per mini-batch. The gradient is then the
  same however rows fall into micro-batches (`use_dynamic_bsz`, `balance_batch`) and ranks, up to float rounding.
- `micro_batch` (verl's legacy workers): each micro-batch's own mean, weighted by its rows / the mini-batch's.

The counts are those of the mask the loss uses. Rejection sampling before the update (decoupled mode) filters
the batch's `response_mask` itself, so they are; inside the update (bypass mode) the filtered mask appears with
each micro-batch's forward, and `observe` / `rescale` correct the weights once the mini-batch is through.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from hybridrl.algorithms.aggregate import LOSS_AGG_SCOPES, micro_weight, mini_batch_counts
from hybridrl.utils.batch import Batch
from hybridrl.utils.collectives import rank_and_world_size


class MicroBatchWeights:
    """`sequence_parallel`: the role's Ulysses group size; the ranks of a group hold the same rows, so each row is
    counted once (the counts summed over the ranks, divided by it) and the weights scale for the `ranks / sp`
    distinct shards (`distributed.ulysses` makes up the rest in backward)."""

    def __init__(self, scope: str, mini: Batch, sequence_parallel: int = 1) -> None:
        if scope not in LOSS_AGG_SCOPES:
            raise ValueError(f"loss_agg_scope={scope!r} is not one of {list(LOSS_AGG_SCOPES)}")
        self.scope, self.mini_rows, self.sequence_parallel = scope, len(mini), sequence_parallel
        if scope == "mini_batch":
            world = rank_and_world_size()[1]
            self.ranks = world // sequence_parallel  # the distinct shards whose gradients are averaged
            self.counts = mini_batch_counts(mini["response_mask"])
            if world > 1:
                dist.all_reduce(self.counts)  # queued on the device: no host sync
                self.counts = self.counts // sequence_parallel
        self.filtered: torch.Tensor | None = None  # counts of the masks the losses used, when filtered in the update
        self._filtered_total: torch.Tensor | None = None  # ... summed over the ranks

    def observe(self, mask: torch.Tensor) -> None:
        """A micro-batch's loss used `mask`, its response mask filtered in the update (bypass mode's rejection
        sampling, workers/update_correction.py); its weight must then be `self(mask, mode)` too."""
        counts = mini_batch_counts(mask)
        self.filtered = counts if self.filtered is None else self.filtered + counts

    def rescale(self, loss_agg_mode: str) -> torch.Tensor | float:
        """After the mini-batch's last micro-batch: what its gradients and weighted metrics are multiplied by so
        the weights, shares of the unfiltered counts, become shares of the filtered ones (the mean over the kept
        tokens or sequences): unfiltered / filtered count of the mode's unit; 1 when nothing was filtered here.
        Collective over the ranks of the mini-batch when filtered (each rank calls it as often)."""
        if self.filtered is None or self.scope == "micro_batch" or loss_agg_mode == "token-sum":
            return 1.0
        if self._filtered_total is None:
            self._filtered_total = self.filtered.clone()
            if rank_and_world_size()[1] > 1:
                dist.all_reduce(self._filtered_total)
                self._filtered_total = self._filtered_total // self.sequence_parallel
        unit = 0 if loss_agg_mode == "token-mean" else 1
        return (self.counts[unit] / torch.clamp(self._filtered_total[unit], min=1)).to(torch.float32)

    def __call__(self, mask: torch.Tensor, loss_agg_mode: str) -> torch.Tensor | float:
        """The weight of `agg_loss` over the rows of `mask` (B, T): a micro-batch's, or several's together."""
        if self.scope == "micro_batch":
            return mask.shape[0] / self.mini_rows
        return micro_weight(loss_agg_mode, mask, self.counts, self.ranks)
