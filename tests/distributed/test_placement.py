"""resolve_placement: the hybrid default and clear errors for impossible explicit device lists."""

from __future__ import annotations

import pytest

from hybridrl.distributed.errors import PlacementError
from hybridrl.distributed.placement import num_visible_devices, resolve_placement


def test_default_every_role_shares_every_device():
    placement = resolve_placement({"actor": None, "rollout": None, "ref": None, "critic": None}, 4)
    assert placement == {role: [0, 1, 2, 3] for role in ("actor", "rollout", "ref", "critic")}


def test_split_actor_and_critic_with_colocated_rollout_and_ref():
    placement = resolve_placement({"actor": [0, 1], "rollout": [0, 1], "ref": [1], "critic": [2, 3]}, 4)
    assert placement == {"actor": [0, 1], "rollout": [0, 1], "ref": [1], "critic": [2, 3]}


def test_actor_and_rollout_may_overlap_partially():
    assert resolve_placement({"actor": [0, 1], "rollout": [1, 2]}, 4)["rollout"] == [1, 2]


@pytest.mark.parametrize("ids, pattern", [
    ([0, 4], r"actor.device_ids \[0, 4\]: \[4\] out of range; 4 device\(s\) are visible"),
    ([-1], r"\[-1\] out of range"),
    ([1, 1], r"lists device\(s\) \[1\] more than once"),
    ([], "is empty"),
])
def test_invalid_lists(ids, pattern):
    with pytest.raises(PlacementError, match=pattern):
        resolve_placement({"actor": ids}, 4)


def test_actor_critic_overlap_is_an_error_with_a_fix():
    with pytest.raises(PlacementError, match=r"actor.device_ids \[0, 1\] and critic.device_ids \[1, 2\] share "
                                             r"device\(s\) \[1\].*critic.device_ids=\[2, 3\]"):
        resolve_placement({"actor": [0, 1], "critic": [1, 2]}, 4)


def test_rollout_critic_overlap_through_a_default_is_named():
    with pytest.raises(PlacementError, match=r"rollout.device_ids \[0, 1\] and critic.device_ids \[0, 1, 2, 3\] "
                                             r"share device\(s\) \[0, 1\] \(critic defaulted to every device\)"):
        resolve_placement({"actor": [0, 1, 2, 3], "rollout": [0, 1], "critic": None}, 4)


def test_no_devices_and_device_counts():
    with pytest.raises(PlacementError, match="no devices"):
        resolve_placement({"actor": None}, 0)
    assert num_visible_devices("cpu") >= 1
    assert num_visible_devices("cuda") >= 0
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        num_visible_devices("tpu")
