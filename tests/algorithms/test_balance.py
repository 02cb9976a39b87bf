"""Sequence-length balancing: equal-size groups, near-equal token sums, and verl's metric names."""

import random

import torch

from hybridrl.algorithms.balance import balanced_order, balanced_partitions


def test_groups_have_equal_sizes_and_cover_every_row_once():
    lengths = [random.Random(0).randint(1, 500) for _ in range(37)]
    groups = balanced_partitions(lengths, 4)
    assert [len(g) for g in groups] == [10, 9, 9, 9]
    assert sorted(r for g in groups for r in g) == list(range(37))


def test_balancing_evens_out_a_sorted_batch():
    lengths = list(range(100, 0, -1))  # the long rows all in the first contiguous half
    order, metrics = balanced_order(torch.tensor([[1] * n + [0] * (100 - n) for n in lengths]), parts=2)
    assert sorted(order) == list(range(100))
    assert metrics["global_seqlen/max"] - metrics["global_seqlen/min"] == sum(range(51, 101)) - sum(range(1, 51))
    assert metrics["global_seqlen/minmax_diff"] == 2500
    assert metrics["global_seqlen/balanced_max"] - metrics["global_seqlen/balanced_min"] <= 100
    assert metrics["global_seqlen/mean"] == sum(lengths) / 2
    first, second = order[:50], order[50:]
    assert abs(sum(lengths[r] for r in first) - sum(lengths[r] for r in second)) <= 100


def test_one_part_keeps_the_order():
    order, metrics = balanced_order(torch.ones(5, 3), parts=1)
    assert order == [0, 1, 2, 3, 4] and metrics["global_seqlen/minmax_diff"] == 0
