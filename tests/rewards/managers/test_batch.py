"""verl's batch manager: one call of a batched function, reward_kwargs passed to it, result checks."""

from __future__ import annotations

import pytest

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.manager import RewardFunctionError
from hybridrl.rewards.managers import build_reward_manager
from tests.rewards.managers.helpers import config, rows


def batch_config(reward_file: str, name: str, *overrides: str):
    return config("reward_manager.name=batch", f"custom_reward_function.path={reward_file}",
                  f"custom_reward_function.name={name}", *overrides)


def test_one_call_with_the_managers_kwargs(reward_file):
    manager = build_reward_manager(batch_config(reward_file, "batched", "+reward_model.reward_kwargs.scale=2.0"), None)
    assert manager(None, rows(["a", "b", "c"], ["a", "x", "c"])).scores == [2.0, 0.0, 2.0]


def test_verls_math_batch_example_through_its_verl_path(tmp_path):
    verl_path = tmp_path / "verl" / "utils" / "reward_score" / "math_batch.py"
    manager = build_reward_manager(batch_config(str(verl_path), "compute_score_batched"), None)
    scored = manager(None, rows(["\\boxed{2}", "\\boxed{3}"], ["2", "2"]))
    assert scored.scores == [1.0, 0.0]


def test_wrong_length_results_and_raising_functions(reward_file):
    with pytest.raises(RewardFunctionError, match="returned list of 1 items for 2 rows"):
        build_reward_manager(batch_config(reward_file, "short"), None)(None, rows(["a", "b"], ["a", "b"]))
    with pytest.raises(RewardFunctionError, match="raised TypeError"):
        build_reward_manager(batch_config(reward_file, "row"), None)(None, rows(["a"], ["a"]))
    zeroed = build_reward_manager(batch_config(reward_file, "row", "reward_model.on_error=zero"), None)(
        None, rows(["a", "b"], ["a", "b"]))
    assert zeroed.scores == [0.0, 0.0] and zeroed.num_errors == 2


def test_the_batch_manager_needs_a_batched_function():
    with pytest.raises(ConfigError, match="reward_manager.name=batch calls a batched reward function"):
        build_reward_manager(config("reward_manager.name=batch"), None)
