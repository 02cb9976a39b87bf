"""DAPO's group filter on hand-built groups: which rows and groups survive, and what the dropped ones shared."""

from __future__ import annotations

from collections import Counter

import pytest

from hybridrl.algorithms.group_filter import filter_constant_groups


def test_constant_groups_go_and_varied_groups_stay():
    # a: all correct, b: mixed, c: all wrong, d: mixed only in its last response
    uids = ["a", "a", "a", "b", "b", "b", "c", "c", "c", "d", "d", "d"]
    values = [1, 1, 1, 0, 1, 0, 0, 0, 0, 0.5, 0.5, 0.25]
    result = filter_constant_groups(uids, values)
    assert result.kept_groups == ["b", "d"]
    assert result.kept_rows == [3, 4, 5, 9, 10, 11]
    assert result.constant_values == Counter({1.0: 1, 0.0: 1})
    assert result.num_dropped_groups == 2


def test_a_group_of_one_is_kept_as_in_verl():
    result = filter_constant_groups(["solo", "pair", "pair"], [0.0, 2.0, 2.0])
    assert result.kept_groups == ["solo"] and result.kept_rows == [0]


def test_equal_values_are_constant_even_where_numpy_std_is_not_zero():
    # np.std([0.1, 0.1, 0.1]) == 1.39e-17 > 0, so verl would keep this group by rounding
    result = filter_constant_groups(["g"] * 3, [0.1, 0.1, 0.1])
    assert result.kept_groups == [] and result.constant_values == Counter({0.1: 1})


def test_interleaved_rows_keep_batch_order_and_first_seen_group_order():
    result = filter_constant_groups(["x", "y", "x", "y"], [True, 1.0, False, 1.0])  # bools count as 1 / 0
    assert result.kept_groups == ["x"] and result.kept_rows == [0, 2]


def test_nan_and_length_mismatch_are_refused():
    with pytest.raises(ValueError, match="NaN"):
        filter_constant_groups(["a", "a"], [1.0, float("nan")])
    with pytest.raises(ValueError, match="one of each per row"):
        filter_constant_groups(["a", "a"], [1.0])
