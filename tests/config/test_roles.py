"""Which roles a config turns on, and what rollout.name=auto means on each device type."""

from __future__ import annotations

from hybridrl.config import critic_enabled, load_config, ref_enabled, rollout_backend_name


def test_critic_auto_follows_the_estimator():
    assert critic_enabled(load_config()) is True  # default estimator gae
    assert critic_enabled(load_config(["algorithm.adv_estimator=grpo"])) is False
    assert critic_enabled(load_config(["algorithm.adv_estimator=grpo", "critic.enable=true"])) is True
    assert critic_enabled(load_config(["critic.enable=false"])) is False


def test_ref_needed_by_either_kl():
    assert ref_enabled(load_config()) is False
    assert ref_enabled(load_config(["actor_rollout_ref.actor.use_kl_loss=true"])) is True
    assert ref_enabled(load_config(["algorithm.use_kl_in_reward=true"])) is True


def test_rollout_name_auto():
    cfg = load_config()
    assert (rollout_backend_name(cfg, "cuda"), rollout_backend_name(cfg, "cpu")) == ("hybrid", "hf")
    assert rollout_backend_name(load_config(["actor_rollout_ref.rollout.name=hf"]), "cuda") == "hf"
