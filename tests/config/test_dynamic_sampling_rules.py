"""algorithm.filter_groups rules, and the notices for settings verl accepts with a surprising (or no) effect:
filter_groups with n=1, over_sample_rate, val_only without val_before_train."""

from __future__ import annotations

import logging

import pytest

from hybridrl.config import ConfigError, load_config, validate_config
from hybridrl.config.dynamic_sampling_rules import filter_groups_problems

VALID = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4", "algorithm.adv_estimator=grpo"]
DAPO = VALID + ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
                "data.gen_batch_size=3072", "algorithm.filter_groups.max_num_gen_batches=10"]


def problems(overrides: list[str]) -> list[str]:
    return filter_groups_problems(load_config(overrides))


def test_a_dapo_config_validates():
    validate_config(load_config(DAPO))
    assert problems(VALID + ["algorithm.filter_groups.metric=null"]) == []  # off: nothing to check


def test_the_metric_is_required():
    (message,) = problems(DAPO + ["algorithm.filter_groups.metric=null"])
    assert "algorithm.filter_groups.enable=true needs algorithm.filter_groups.metric" in message and "acc" in message
    with pytest.raises(ConfigError, match="needs algorithm.filter_groups.metric"):
        validate_config(load_config(DAPO + ["algorithm.filter_groups.metric=null"]))


def test_seq_final_reward_with_kl_in_reward_is_refused_by_name():
    (message,) = problems(DAPO + ["algorithm.filter_groups.metric=seq_final_reward", "algorithm.use_kl_in_reward=true"])
    assert message.startswith("algorithm.filter_groups.metric=seq_final_reward") and "not implemented" in message
    assert "seq_reward" in message
    assert problems(DAPO + ["algorithm.filter_groups.metric=seq_final_reward"]) == []  # = seq_reward without KL


def test_a_reward_model_filters_on_its_score_only():
    rm = ["reward_model.enable=true", "reward_model.model.path=/models/rm"]
    (message,) = problems(DAPO + rm)
    assert "algorithm.filter_groups.metric='acc' with reward_model.enable=true" in message and "seq_reward" in message
    assert problems(DAPO + rm + ["algorithm.filter_groups.metric=seq_reward"]) == []


def test_more_than_one_generation_batch_in_flight_is_refused_by_name():
    (message,) = problems(DAPO + ["algorithm.filter_groups.max_inflight_gen_batches=2"])
    assert message.startswith("algorithm.filter_groups.max_inflight_gen_batches=2:") and "not implemented" in message
    assert "data.gen_batch_size" in message


def test_val_only_needs_validation_data():
    with pytest.raises(ConfigError, match="trainer.val_only=true validates once and stops, but data.val_files is empty"):
        validate_config(load_config(VALID + ["trainer.val_only=true", "data.val_files=[]"]))
    validate_config(load_config(VALID + ["trainer.val_only=true"]))


@pytest.mark.parametrize(("overrides", "phrase"), [
    (DAPO + ["actor_rollout_ref.rollout.n=1"], "dynamic sampling filters nothing"),
    (VALID + ["trainer.val_only=true", "trainer.val_before_train=false"], "this run trains"),
])
def test_settings_verl_runs_with_a_surprise_warn(overrides, phrase, caplog):
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        load_config(overrides)
    assert phrase in caplog.text


@pytest.mark.parametrize(("overrides", "phrase"), [
    (VALID + ["actor_rollout_ref.rollout.over_sample_rate=0.1"],
     "over_sample_rate=0.1 has no effect, as in verl: verl's trainer (January and August 2026) reads it nowhere"),
    (DAPO + ["reward_model.launch_reward_fn_async=true"], "scoring overlaps nothing"),
])
def test_settings_without_effect_are_named(overrides, phrase, caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        validate_config(load_config(overrides))
    assert phrase in caplog.text


def test_no_notice_for_the_defaults(caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        load_config(VALID)
    assert "over_sample_rate" not in caplog.text and "filter_groups" not in caplog.text and "val_only" not in caplog.text
