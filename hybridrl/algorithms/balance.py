"""Sequence-length balancing across data-parallel ranks (verl's `trainer.balance_batch`).

The controller hands each rank a contiguous, equal-size slice of the batch; with variable-length rows
one rank can get far more tokens than another and every other rank waits for it in each collective.
`balanced_order` reorders rows so the slices carry near-equal token sums: longest row first, each to
the lightest slice that still has room (greedy, within 4/3 of optimal for this partition problem;
verl uses Karmarkar-Karp). Rows move as a whole, so losses, advantages (grouped by uid) and metrics
are unchanged; only which rank computes which row changes.
"""

from __future__ import annotations

import heapq

import torch


def balanced_partitions(lengths: list[int], parts: int) -> list[list[int]]:
    """Row indices in `parts` groups of equal size (len(lengths) / parts, the first groups one more when
    it does not divide) with near-equal length sums; each group ascending."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    sizes = [len(lengths) // parts + (1 if p < len(lengths) % parts else 0) for p in range(parts)]
    groups: list[list[int]] = [[] for _ in range(parts)]
    heap = [(0, p) for p in range(parts) if sizes[p]]  # (token sum, part) of the parts with room
    heapq.heapify(heap)
    for row in sorted(range(len(lengths)), key=lambda r: (-lengths[r], r)):
        total, part = heapq.heappop(heap)
        groups[part].append(row)
        if len(groups[part]) < sizes[part]:
            heapq.heappush(heap, (total + lengths[row], part))
    return [sorted(group) for group in groups]


def balance_metrics(lengths: list[int], before: list[list[int]], after: list[list[int]]) -> dict[str, float]:
    """verl's `global_seqlen/*`: per-rank token sums of the original split (min, max, minmax_diff) and of
    the balanced one (balanced_min, balanced_max), and the mean."""
    sums = [sum(lengths[r] for r in group) for group in before]
    balanced = [sum(lengths[r] for r in group) for group in after]
    return {"global_seqlen/min": float(min(sums)), "global_seqlen/max": float(max(sums)),
            "global_seqlen/minmax_diff": float(max(sums) - min(sums)),
            "global_seqlen/balanced_min": float(min(balanced)), "global_seqlen/balanced_max": float(max(balanced)),
            "global_seqlen/mean": float(sum(sums)) / len(sums)}


def balanced_order(attention_mask: torch.Tensor, parts: int) -> tuple[list[int], dict[str, float]]:
    """The row order whose `parts` contiguous equal slices are balanced by token count, and the metrics."""
    lengths = attention_mask.sum(-1).tolist()
    after = balanced_partitions(lengths, parts)
    order = [row for group in after for row in group]
    before, start = [], 0
    for group in after:  # the contiguous split the same sizes would have made without balancing
        before.append(list(range(start, start + len(group))))
        start += len(group)
    return order, balance_metrics(lengths, before, after)
