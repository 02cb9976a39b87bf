"""submit_responsive: the switch interval is short exactly while background tasks run."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from hybridrl.utils.threads import SWITCH_INTERVAL_S, submit_responsive


def test_the_interval_is_short_while_tasks_run_and_restored_after_success_and_error():
    default = sys.getswitchinterval()
    assert default > SWITCH_INTERVAL_S
    release = [threading.Event(), threading.Event()]

    def work(i):
        release[i].wait(10)
        if i == 1:
            raise ValueError("scorer failed")
        return i

    with ThreadPoolExecutor(max_workers=2) as pool:
        first = submit_responsive(pool, work, 0)
        second = submit_responsive(pool, work, 1)
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
        release[0].set()
        assert first.result(10) == 0
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)  # the second task still runs
        release[1].set()
        with pytest.raises(ValueError, match="scorer failed"):
            second.result(10)
    assert sys.getswitchinterval() == default
