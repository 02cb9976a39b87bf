"""Micro-batches of a worker's batch: a fixed row count, or a token budget (verl's use_dynamic_bsz).

With a budget (verl's `rearrange_micro_batches`) a row counts its real tokens (attention_mask sum: prompt
+ response) and each micro-batch holds at most `*_max_token_len_per_gpu` of them, in as few micro-batches
as the budget allows (more when the ranks of a group must agree on a count), balanced in tokens. Unlike
verl's Karmarkar-Karp partition, rows are sorted longest first and cut into contiguous runs, so rows of
similar length share a micro-batch and trimming the padding per micro-batch (use_remove_padding) leaves
little. A row over the budget gets a micro-batch of its own (never dropped; a warning names the key).
Outputs of forward-only passes are put back in the batch's row order (`MicroBatches.restore`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from hybridrl.config.batch_rules import DYNAMIC_BSZ_KEYS, token_budget
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.sequence_parallel import PHASE_ROLES, SP_KEYS, sequence_parallel_size
from hybridrl.logging.log import get_logger
from hybridrl.utils.batch import Batch

log = get_logger("workers.micro_batches")
_warned_keys: set[str] = set()


# ------------------------------------------------------------------------- pure partitioning
def _longest_first(lengths: Sequence[int]) -> list[int]:
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))


def _runs(order: list[int], lengths: Sequence[int], cap: int) -> list[list[int]]:
    """Cut `order` into contiguous runs of at most `cap` tokens (a run always takes its first row)."""
    runs: list[list[int]] = []
    current: list[int] = []
    load = 0
    for i in order:
        if current and load + lengths[i] > cap:
            runs.append(current)
            current, load = [], 0
        current.append(i)
        load += lengths[i]
    return runs + [current] if current else runs


def min_num_parts(lengths: Sequence[int], max_tokens: int) -> int:
    """How many micro-batches the budget needs (for the sorted runs `partition_by_tokens` makes)."""
    return len(_runs(_longest_first(lengths), lengths, max_tokens))


def partition_by_tokens(lengths: Sequence[int], max_tokens: int, num_parts: int | None = None) -> list[list[int]]:
    """Row indices per micro-batch; every row exactly once; each part <= `max_tokens` tokens or one row.

    `num_parts` (at most len(lengths); default the fewest the budget allows) parts, balanced: the
    smallest per-part cap that still needs no more than `num_parts` runs; parts with the most rows are
    halved when the runs come out fewer.
    """
    if max_tokens < 1:
        raise ValueError(f"the token budget must be >= 1, got {max_tokens}")
    order = _longest_first(lengths)
    wanted = max(num_parts or 1, min_num_parts(lengths, max_tokens))
    if wanted > len(lengths):
        raise ValueError(f"cannot make {wanted} non-empty micro-batches of {len(lengths)} rows")
    low, high = 1, max_tokens  # smallest cap with <= wanted runs: the runs' count falls as the cap grows
    while low < high:
        mid = (low + high) // 2
        if len(_runs(order, lengths, mid)) <= wanted:
            high = mid
        else:
            low = mid + 1
    parts = _runs(order, lengths, low)
    while len(parts) < wanted:
        largest = max(range(len(parts)), key=lambda p: len(parts[p]))
        rows = parts.pop(largest)
        parts[largest:largest] = [rows[: len(rows) // 2], rows[len(rows) // 2:]]
    return parts


def _alone(count: int) -> int:
    """No other rank to agree with."""
    return count


# ---------------------------------------------------------------------------- batch level
@dataclass
class MicroBatches:
    parts: list[Batch]
    order: torch.Tensor | None = None  # input row of each row of the concatenated parts; None = in order

    def restore(self, rows: torch.Tensor) -> torch.Tensor:
        """Concatenated per-part outputs (first dim = rows) back in the input batch's row order."""
        if self.order is None:
            return rows
        out = torch.empty_like(rows)
        out[self.order.to(rows.device)] = rows
        return out


@dataclass(frozen=True)
class MicroBatchPlan:
    """How one phase cuts its batch: `rows` per micro-batch, or a token budget when `max_tokens` is set. Under
    Ulysses sequence parallelism (`sp` > 1, the phase role's `sp_key`) `max_tokens` is the configured budget x sp,
    as verl's `max_token_len * ulysses_sequence_parallel_size`: each of a group's sp ranks holds 1/sp of every
    sequence, so per rank the budget is what the key says."""

    rows: int
    max_tokens: int | None = None
    budget_key: str = ""
    sp: int = 1
    sp_key: str = ""

    @classmethod
    def for_phase(cls, cfg: HybridRLConfig, phase: str, rows: int) -> "MicroBatchPlan":
        """`phase` is a key of DYNAMIC_BSZ_KEYS (old_log_prob, ref, values, update_critic, update_actor)."""
        role = PHASE_ROLES[phase]
        sp = max(sequence_parallel_size(cfg, role), 1)
        budget = token_budget(cfg, phase)
        return cls(rows, None if budget is None else budget * sp, DYNAMIC_BSZ_KEYS[phase][1], sp, SP_KEYS[role])

    def split(self, batch: Batch, max_over_ranks: Callable[[int], int] = _alone) -> MicroBatches:
        """With a budget, `max_over_ranks` (the role's `ParallelStrategy.max_over_ranks`: a collective under FSDP2,
        where every rank must run as many forwards) makes the ranks agree on the number of micro-batches."""
        if self.max_tokens is None:
            return MicroBatches(batch.split(self.rows))
        lengths = batch["attention_mask"].sum(dim=-1).tolist()
        self._warn_oversize(lengths)
        num_parts = max_over_ranks(min_num_parts(lengths, self.max_tokens))
        parts = partition_by_tokens(lengths, self.max_tokens, num_parts)
        order = torch.tensor([i for part in parts for i in part], dtype=torch.long)
        return MicroBatches([batch.index(part) for part in parts], order)

    def _warn_oversize(self, lengths: list[int]) -> None:
        longest = max(lengths, default=0)
        if self.max_tokens is not None and longest > self.max_tokens and self.budget_key not in _warned_keys:
            _warned_keys.add(self.budget_key)
            budget, needed = f"{self.budget_key}={self.max_tokens}", longest
            if self.sp > 1:  # the key's value is per rank: a row's tokens are split over the group's sp ranks
                per_rank = self.max_tokens // self.sp
                budget = f"{self.max_tokens} tokens ({self.budget_key}={per_rank} x {self.sp_key} {self.sp})"
                needed = -(-longest // self.sp)
            log.warning("a row holds %d tokens, over %s: it runs as a micro-batch of its own (memory peaks "
                        "there); raise %s to at least %d (warned once)", longest, budget, self.budget_key, needed)
