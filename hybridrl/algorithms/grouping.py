"""Group statistics for outcome estimators: map verl's `uid` ids to dense group numbers and
compute per-group count, mean and unbiased std with scatter ops (no loop over the batch)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch



def group_ids_from_index(index: np.ndarray | Sequence[object] | torch.Tensor, batch_size: int,
                         device: torch.device | str | None = None) -> torch.Tensor:
    """Dense group numbers `(B,)` int64 from `index` (uid strings, ints, or a tensor); equal ids → same group."""
    if isinstance(index, torch.Tensor):
        if index.dim() != 1:
            raise ValueError(f"index must be 1-D with one group id per row; got shape {tuple(index.shape)}")
        ids = torch.unique(index, return_inverse=True)[1]
    else:
        ids = torch.from_numpy(_factorize(index))
    if ids.numel() != batch_size:
        raise ValueError(
            f"index has {ids.numel()} group ids but the batch has {batch_size} rows; pass one uid per response row"
        )
    return ids.to(device=device, dtype=torch.long)


def _factorize(index: np.ndarray | Sequence[object]) -> np.ndarray:
    """Integer codes for arbitrary hashable ids; np.unique when they sort, first-seen order otherwise."""
    array = np.asarray(index, dtype=object) if not isinstance(index, np.ndarray) else index
    if array.ndim != 1:
        raise ValueError(f"index must be 1-D with one group id per row; got shape {array.shape}")
    try:
        return np.unique(array, return_inverse=True)[1].reshape(-1).astype(np.int64)
    except TypeError:  # mixed, unorderable ids (e.g. str and int): hash them instead
        codes: dict[object, int] = {}
        return np.array([codes.setdefault(key, len(codes)) for key in array.tolist()], dtype=np.int64)


def per_row_group_sum(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Sum of `values` over each row's group, broadcast back to rows: `(B,)` → `(B,)` (index_add)."""
    num_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    group_sums = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, group_ids, values)
    return group_sums[group_ids]


def group_mean_std(scores: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row (mean, unbiased std, count) of each row's group, all `(B,)`.

    Like verl's loop, a group of size 1 gets mean 0 and std 1; larger groups use torch.std's N−1 divisor.
    """
    counts = per_row_group_sum(torch.ones_like(scores), group_ids)
    means = per_row_group_sum(scores, group_ids) / counts
    squared_deviation_sums = per_row_group_sum((scores - means) ** 2, group_ids)
    stds = torch.sqrt(squared_deviation_sums / (counts - 1).clamp(min=1))
    is_singleton = counts == 1
    means = torch.where(is_singleton, torch.zeros_like(means), means)
    stds = torch.where(is_singleton, torch.ones_like(stds), stds)
    return means, stds, counts
