"""The naive manager and the registry/builder: which manager a config builds, kwargs routing, errors."""

from __future__ import annotations

import pytest

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.managers import REWARD_MANAGERS, build_reward_manager, register
from hybridrl.rewards.managers.naive import NaiveRewardManager
from tests.rewards.managers.helpers import config, rows


def test_verls_managers_are_registered():
    assert {"naive", "batch", "dapo", "prime"} <= set(REWARD_MANAGERS)
    assert isinstance(build_reward_manager(config(), None), NaiveRewardManager)
    assert isinstance(build_reward_manager(config("reward_model.reward_manager=naive"), None), NaiveRewardManager)


def test_naive_scores_rows_with_the_builtin_table():
    scored = build_reward_manager(config(), None)(None, rows(["#### 4", "#### 5", "no"], ["4", "4", "4"]))
    assert scored.scores == [1.0, 0.0, 0.0] and scored.num_errors == 0 and scored.extra == {}


def test_custom_function_gets_its_kwargs_and_the_manager_none(reward_file):
    cfg = config(f"custom_reward_function.path={reward_file}", "custom_reward_function.name=row",
                 "+custom_reward_function.reward_kwargs.bonus=0.5")
    scored = build_reward_manager(cfg, None)(None, rows(["a", "b"], ["a", "a"]))
    assert scored.scores == [1.5, 0.5] and scored.extra == {"pred": ["a", "b"]}
    with pytest.raises(ConfigError, match=r"\['bonus'\], which the naive reward manager does not take.*"
                                          r"custom_reward_function.reward_kwargs"):
        build_reward_manager(config(f"custom_reward_function.path={reward_file}", "custom_reward_function.name=row",
                                    "+reward_model.reward_kwargs.bonus=0.5"), None)


def test_naive_refuses_verls_per_row_timeout_and_points_at_prime():
    with pytest.raises(ConfigError, match="compute_score_timeout.*reward_manager.name=prime"):
        build_reward_manager(config("+reward_model.reward_kwargs.compute_score_timeout=5"), None)


def test_on_error_zero_counts_rows(reward_file):
    cfg = config(f"custom_reward_function.path={reward_file}", "custom_reward_function.name=boom",
                 "reward_model.on_error=zero")
    scored = build_reward_manager(cfg, None)(None, rows(["a", "b"], ["a", "a"]))
    assert scored.scores == [0.0, 0.0] and scored.num_errors == 2


def test_unknown_manager_names_the_registered_ones_and_importlib():
    with pytest.raises(ConfigError, match=r"'fancy' is not a reward manager.*'batch', 'dapo', 'naive', 'prime'.*"
                                          r"reward_manager.source=importlib"):
        build_reward_manager(config("reward_manager.name=fancy"), None)


def test_register_adds_a_manager_and_refuses_a_second_class_under_one_name():
    @register("test-constant")
    class Constant:
        def __init__(self, context, value=0.25):
            self.value = value

        def __call__(self, batch, rows):
            from hybridrl.rewards.manager import ScoredBatch

            return ScoredBatch(scores=[self.value] * len(rows))

        def close(self):
            pass

    try:
        manager = build_reward_manager(config("reward_manager.name=test-constant",
                                              "+reward_model.reward_kwargs.value=2.0"), None)
        assert manager(None, rows(["x"], ["y"])).scores == [2.0]
        with pytest.raises(ValueError, match="already registered"):
            register("test-constant")(type("Other", (), {}))
    finally:
        REWARD_MANAGERS.pop("test-constant")


def test_sandbox_settings_reach_the_code_scorer():
    from hybridrl.rewards.managers.context import score_fn_spec

    spec = score_fn_spec(config("reward_model.sandbox_fusion.url=http://127.0.0.1:9/run_code",
                                "reward_model.sandbox_fusion.max_concurrent=3"))
    assert spec.kwargs == {"memory_limit_mb": 1024, "sandbox_fusion_url": "http://127.0.0.1:9/run_code",
                           "concurrent_semaphore": 3}
    assert score_fn_spec(config()).kwargs == {"memory_limit_mb": 1024}
    assert spec.load().func.__name__ == "default_compute_score"
