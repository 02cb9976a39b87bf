"""DAPO's group filter (Yu et al. 2025, "DAPO", §3.2 Dynamic Sampling; verl's `filter_groups`).

A prompt whose n responses all get the same value of the filter metric (all correct, all wrong) gives every
response the same group-relative advantage (GRPO: (r - mean) / std = 0), so it contributes no policy
gradient and only dilutes the batch. Dynamic sampling drops such groups and keeps the rest.

verl (recipe/dapo/dapo_ray_trainer.py) keeps a group when `np.std(values) > 0` or when it has one row. Here
"constant" means every value equals the first: np.std reads ~1e-17 for some equal values (three 0.1s) and
would keep such a group by rounding, which is not the rule's intent. A group of one row is kept, as in verl
(there is nothing to compare it with).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GroupFilterResult:
    """Which rows and groups survive the filter."""

    kept_rows: list[int]  # row indices of the kept groups, in batch order
    kept_groups: list[Hashable]  # their group ids, in order of first appearance
    constant_values: Counter  # {the shared value of a dropped group: how many dropped groups share it}

    @property
    def num_dropped_groups(self) -> int:
        return sum(self.constant_values.values())


def filter_constant_groups(group_ids: Sequence[Hashable], values: Sequence[float]) -> GroupFilterResult:
    """Keep the groups (rows sharing a group id, verl's `uid`) whose `values` are not all equal, and every
    group of one row. `group_ids` and `values`: one per row, (B,). A NaN value raises ValueError: NaN
    equals nothing, so a NaN group would be kept or dropped by accident."""
    if len(group_ids) != len(values):
        raise ValueError(f"filter_constant_groups got {len(group_ids)} group ids but {len(values)} values; pass one "
                         "of each per row")
    rows_of: dict[Hashable, list[int]] = {}
    values_of: dict[Hashable, list[float]] = {}
    for row, (group, value) in enumerate(zip(group_ids, values)):
        value = float(value)
        if math.isnan(value):
            raise ValueError(f"row {row} (group {group!r}) has a NaN filter value; the reward produced NaN")
        rows_of.setdefault(group, []).append(row)
        values_of.setdefault(group, []).append(value)
    kept_groups: list[Hashable] = []
    constant_values: Counter = Counter()
    for group, group_values in values_of.items():
        if len(group_values) == 1 or any(v != group_values[0] for v in group_values):
            kept_groups.append(group)
        else:
            constant_values[group_values[0]] += 1
    kept_rows = sorted(row for group in kept_groups for row in rows_of[group])
    return GroupFilterResult(kept_rows, kept_groups, constant_values)
