"""Both verl generations of keys map onto one internal key; verl 0.5/0.6 rollout-correction keys are translated."""

from __future__ import annotations

import logging

import pytest

from hybridrl.config import ConfigError, load_config
from hybridrl.config.index import config_value


@pytest.mark.parametrize(("august", "internal", "value"), [
    ("reward.reward_manager.name", "reward_manager.name", "dapo"),
    ("reward.reward_manager.source", "reward_manager.source", "importlib"),
    ("reward.reward_manager.module.path", "reward_manager.module.path", "/x/rm.py"),
    ("reward.custom_reward_function.path", "custom_reward_function.path", "/x/score.py"),
    ("reward.custom_reward_function.name", "custom_reward_function.name", "score"),
    ("reward.num_workers", "reward_model.num_workers", 4),
    ("reward.reward_model.enable", "reward_model.enable", True),
    ("reward.reward_model.model_path", "reward_model.model.path", "/x/rm"),
    ("reward.reward_model.enable_resource_pool", "reward_model.enable_resource_pool", False),
    ("reward.sandbox_fusion.url", "reward_model.sandbox_fusion.url", "http://localhost:8080"),
    ("sandbox_fusion.max_concurrent", "reward_model.sandbox_fusion.max_concurrent", 8),
    ("critic.fsdp.param_offload", "critic.model.fsdp_config.param_offload", True),
    ("critic.fsdp.fsdp_size", "critic.model.fsdp_config.fsdp_size", 1),
])
def test_august_spelling_sets_the_internal_key(august, internal, value):
    assert config_value(load_config([f"{august}={value}"]), internal) == value


def test_august_reward_kwargs_reach_the_reward_manager():
    cfg = load_config(["+reward.reward_kwargs.overlong_buffer_cfg.enable=True", "+reward.reward_kwargs.max_resp_len=64"])
    assert cfg.reward_model.reward_kwargs == {"overlong_buffer_cfg": {"enable": True}, "max_resp_len": 64}


def test_unknown_key_in_the_august_group_gets_a_did_you_mean():
    with pytest.raises(ConfigError, match=r"unknown config key 'reward.reward_manager.nme'; did you mean 'reward_manager.name'"):
        load_config(["reward.reward_manager.nme=dapo"])


def test_both_generations_set_differently_in_one_source():
    with pytest.raises(ConfigError, match="reward_manager.name='dapo' and reward.reward_manager.name='prime' are two "
                                          "spellings of one key"):
        load_config(["reward_manager.name=dapo", "reward.reward_manager.name=prime"])


def test_null_in_the_legacy_group_means_not_set(tmp_path):
    path = tmp_path / "aug.yaml"
    path.write_text("reward_model:\n  enable: null\n  num_workers: null\n  model:\n    path: null\n"
                    "custom_reward_function:\n  name: null\nreward:\n  reward_model:\n    enable: true\n")
    cfg = load_config(config_file=str(path))
    assert cfg.reward_model.enable is True and cfg.reward_model.num_workers == 1
    assert cfg.custom_reward_function.name == "compute_score"


def test_verl_05_tis_cap_becomes_token_level_importance_sampling():
    assert load_config(["+actor_rollout_ref.actor.tis_imp_ratio_cap=-1"]).algorithm.rollout_correction.rollout_is is None
    correction = load_config(["+actor_rollout_ref.actor.tis_imp_ratio_cap=2.0"]).algorithm.rollout_correction
    assert (correction.rollout_is, correction.rollout_is_threshold) == ("token", 2.0)


@pytest.mark.parametrize(("old", "expected"), [
    ({"rollout_is": True, "rollout_is_threshold": 2.5}, {"rollout_is": "token", "rollout_is_threshold": 2.5}),
    ({"rollout_is": True, "rollout_is_threshold": 3.0, "rollout_is_level": "sequence"},
     {"rollout_is": "sequence", "rollout_is_threshold": 3.0}),
    ({"rollout_is": True, "rollout_is_threshold": 2.0, "rollout_is_mode": "mask"},
     {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0"}),
    ({"rollout_is": True, "rollout_is_threshold": 4.0, "rollout_is_threshold_lower": 0.1, "rollout_is_mode": "mask",
      "rollout_is_level": "geometric"}, {"rollout_rs": "seq_mean_k1", "rollout_rs_threshold": "0.1_4.0"}),
])
def test_verl_06_rollout_is_keys(old, expected):
    from hybridrl.config.legacy import translate_legacy

    tree = {"algorithm": {"rollout_correction": {}, **old}}
    problems, _ = translate_legacy(tree, {})
    assert problems == [] and tree["algorithm"] == {"rollout_correction": expected}  # old keys removed


def test_verl_06_metrics_only_and_off():
    cfg = load_config(["+algorithm.rollout_is_threshold=null", "+algorithm.rollout_is=true"])
    assert cfg.algorithm.rollout_correction.rollout_is is None
    with pytest.raises(ConfigError, match="verl 0.7 has no geometric importance weights; use "
                                          "algorithm.rollout_correction.rollout_rs=seq_mean_k1"):
        load_config(["+algorithm.rollout_is=true", "+algorithm.rollout_is_threshold=2", "+algorithm.rollout_is_level=geometric"])
    with pytest.raises(ConfigError, match="rollout_is_veto_threshold=0.01: verl 0.7 removed the veto"):
        load_config(["+algorithm.rollout_is=true", "+algorithm.rollout_is_threshold=2", "+algorithm.rollout_is_veto_threshold=0.01"])


def test_legacy_and_internal_rollout_correction_disagreeing():
    with pytest.raises(ConfigError, match="tis_imp_ratio_cap=2.0 means algorithm.rollout_correction.rollout_is='token', "
                                          "but algorithm.rollout_correction.rollout_is='sequence'"):
        load_config(["+actor_rollout_ref.actor.tis_imp_ratio_cap=2.0", "algorithm.rollout_correction.rollout_is=sequence"])


def test_megatron_only_keys_load_with_a_notice(caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        cfg = load_config(["+actor_rollout_ref.actor.optim.lr_decay_style=cosine", "+actor_rollout_ref.actor.optim.min_lr=0.0",
                           "+actor_rollout_ref.actor.optim.muon_momentum=0.9", "+critic.load_weight=True"])
    assert cfg.actor_rollout_ref.actor.optim.lr_scheduler_type == "constant"  # not moved: a Megatron key
    notices = [r.getMessage() for r in caplog.records if "Megatron-only" in r.getMessage()]
    assert notices == ["Megatron-only settings, no effect under FSDP (verl's FSDP engine ignores them too): "
                       "actor_rollout_ref.actor.optim.lr_decay_style='cosine' (FSDP: actor_rollout_ref.actor.optim."
                       "lr_scheduler_type)"]


@pytest.mark.parametrize(("override", "phrase"), [
    ("trainer.v1.separate_async.hybrid_rollout.enable_switch=true", "step switching"),
    ("trainer.v1.sampler.custom_sampler.path=my_sampler.py", "custom replay-buffer samplers"),
    ("skip.rollout.enable=true", "reusing cached generations (skip.rollout)"),
    ("actor_rollout_ref.actor.fsdp_config.qat.enable=true", "quantization-aware training"),
    ("actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.device_ids"),
    ("trainer.device=npu", "Ascend NPUs are out of scope"),
    ("actor_rollout_ref.actor.checkpoint.strict=false", "non-strict checkpoint loading"),
])
def test_august_features_refused_by_name(override, phrase):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert override.split("=")[0] + "=" in str(err.value) and phrase in str(err.value)


def test_sapo_tau_under_policy_loss_sets_the_actor_keys_verls_loss_reads():
    """verl's August SAPO examples write `+actor_rollout_ref.actor.policy_loss.tau_{pos,neg}`."""
    cfg = load_config(["+actor_rollout_ref.actor.policy_loss.tau_pos=1.1", "+actor_rollout_ref.actor.policy_loss.tau_neg=1.3"])
    assert (cfg.actor_rollout_ref.actor.tau_pos, cfg.actor_rollout_ref.actor.tau_neg) == (1.1, 1.3)
    with pytest.raises(ConfigError, match="two spellings of one key"):
        load_config(["actor_rollout_ref.actor.tau_neg=1.2", "+actor_rollout_ref.actor.policy_loss.tau_neg=1.3"])


def test_sglang_server_settings_load_with_a_notice():
    """verl's sglang_multiturn server config: `sglang_rollout_mode: server` and a `server:` block of HTTP settings."""
    from hybridrl.config.notices import config_notices

    cfg = load_config(["+actor_rollout_ref.rollout.sglang_rollout_mode=server", "actor_rollout_ref.rollout.server.timeout=30",
                       "actor_rollout_ref.rollout.server.max_attempts=5"])
    assert cfg.actor_rollout_ref.rollout.server.timeout == 30.0
    [notice] = [n for n in config_notices(cfg) if "sglang_rollout_mode" in n]
    assert "has no effect" in notice and "rollout.server.* have no effect" in notice
    assert not [n for n in config_notices(load_config([])) if "sglang_rollout_mode" in n]
