"""verl's prime manager: rows in worker processes, a per-row time limit, and recovery after a timeout."""

from __future__ import annotations

import pytest

from hybridrl.rewards.manager import RewardFunctionError
from hybridrl.rewards.managers import build_reward_manager
from tests.rewards.managers.helpers import config, rows


def prime(reward_file: str, name: str, *overrides: str):
    return build_reward_manager(config("reward_manager.name=prime", f"custom_reward_function.path={reward_file}",
                                       f"custom_reward_function.name={name}",
                                       "+reward_model.reward_kwargs.num_processes=2", *overrides), None)


@pytest.mark.slow
def test_a_hanging_row_scores_zero_and_the_pool_recovers(reward_file):
    manager = prime(reward_file, "slow", "+reward_model.reward_kwargs.timeout=3")
    try:
        scored = manager(None, rows(["a", "hang", "c"], ["a", "hang", "x"]))
        assert scored.scores == [1.0, 0.0, 0.0] and scored.num_timeouts == 1
        assert manager._executor is None  # the stuck worker was killed
        again = manager(None, rows(["b"], ["b"]))
        assert again.scores == [1.0] and again.num_timeouts == 0
    finally:
        manager.close()


def test_errors_follow_on_error(reward_file):
    manager = prime(reward_file, "boom")
    try:
        with pytest.raises(RewardFunctionError, match="raised ValueError: bad row"):
            manager(None, rows(["a"], ["a"]))
    finally:
        manager.close()
    manager = prime(reward_file, "boom", "reward_model.on_error=zero")
    try:
        scored = manager(None, rows(["a", "b"], ["a", "b"]))
        assert scored.scores == [0.0, 0.0] and scored.num_errors == 2
    finally:
        manager.close()


def test_builtin_table_and_dict_results(reward_file):
    manager = build_reward_manager(config("reward_manager.name=prime", "+reward_model.reward_kwargs.num_processes=2"),
                                   None)
    try:
        scored = manager(None, rows(["The answer is \\boxed{12}", "Answer: 3"], ["12", "3"],
                                    sources=["numina_olympiads", "math_dapo"]))
        assert scored.scores == [1.0, 1.0] and scored.extra["acc"] == [None, True]
    finally:
        manager.close()
