"""call_with_timeout: a result, a time limit that kills, and errors from the child reported."""

from __future__ import annotations

import time

import pytest

from hybridrl.rewards.timeout import call_with_timeout


def sleepy(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def failing() -> None:
    raise KeyError("missing")


def test_result_timeout_and_error():
    assert call_with_timeout(sleepy, (0.0,), 30) == "woke"
    with pytest.raises(TimeoutError, match="sleepy did not finish within 0.5 s"):
        call_with_timeout(sleepy, (60.0,), 0.5)
    with pytest.raises(RuntimeError, match="KeyError: 'missing'"):
        call_with_timeout(failing, (), 30)
