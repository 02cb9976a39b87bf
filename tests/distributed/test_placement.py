"""num_visible_devices: what a process may use. The `*.device_ids` rules are the config's
(tests/config/test_placement.py)."""

from __future__ import annotations

import pytest

from hybridrl.distributed.placement import num_visible_devices


def test_device_counts():
    assert num_visible_devices("cpu") >= 1
    assert num_visible_devices("cuda") >= 0
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        num_visible_devices("tpu")
