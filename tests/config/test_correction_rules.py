"""Threshold texts of rollout correction: verl's 'lower_upper' bounds and per-option lists load, anything else is
refused by name before a step runs."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, load_config, validate_config
from hybridrl.config.correction_rules import threshold_text_bounds

KEY = "algorithm.rollout_correction"
BASE = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4"]


@pytest.mark.parametrize("text, numbers", [("2.0", [2.0]), ("0.5_5.0", [0.5, 5.0]), ("inf", [float("inf")]),
                                           ("0.999_1.001,2.0", [0.999, 1.001, 2.0])])
def test_threshold_texts_give_their_bounds(text, numbers):
    assert threshold_text_bounds(text) == numbers


@pytest.mark.parametrize("text", ["abc", "5_0.5", "0_2", "-1", "nan", "1_2_3", "0.5_", ""])
def test_other_texts_are_not_thresholds(text):
    assert threshold_text_bounds(text) is None


def test_a_lower_upper_threshold_validates():
    cfg = load_config([*BASE, f"{KEY}.rollout_is=token", f"{KEY}.rollout_is_threshold=0.5_5.0"])
    validate_config(cfg)
    assert cfg.algorithm.rollout_correction.rollout_is_threshold == "0.5_5.0"


@pytest.mark.parametrize("name", ["rollout_is_threshold", "rollout_rs_threshold"])
def test_a_text_that_is_no_threshold_is_refused_by_name(name):
    cfg = load_config([*BASE, f"{KEY}.{name}=abc"])
    with pytest.raises(ConfigError, match=rf"{KEY}.{name}='abc' is not a threshold: write a positive number"):
        validate_config(cfg)
