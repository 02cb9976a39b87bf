"""Configs dumped by verl (`--cfg job`, unresolved) load back through `--config`, for both verl generations."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridrl.config import ConfigError, config_to_yaml, load_config, validate_config

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_january_dump_loads():
    cfg = load_config(config_file=str(FIXTURES / "verl_jan_dump.yaml"))
    arr = cfg.actor_rollout_ref
    assert arr.rollout.name == "auto" and arr.rollout.n == 4 and arr.actor.rollout_n == 4  # ${oc.select:...}
    assert arr.actor.use_remove_padding is True and arr.ref.strategy == "fsdp"
    assert cfg.reward_manager.name == "naive" and cfg.reward_model.reward_manager == "naive"
    assert cfg.reward_model.rollout == {"gpu_memory_utilization": 0.5, "tensor_model_parallel_size": 2}  # `???` dropped
    assert cfg.critic.model.tokenizer_path == "~/models/Qwen2.5-0.5B-Instruct" and cfg.critic.ppo_micro_batch_size_per_gpu is None
    assert arr.actor.profiler.tool_config == {"nsys": {"discrete": None}, "torch": {"step_start": 0, "step_end": None}}
    assert cfg.trainer.device == "cuda" and cfg.trainer.n_gpus_per_node == 8
    validate_config(cfg, world_size=8)


def test_august_dump_loads_with_the_reward_group_and_legacy_nulls():
    cfg = load_config(config_file=str(FIXTURES / "verl_aug_dump.yaml"))
    assert cfg.reward_manager.name == "dapo" == cfg.reward_model.reward_manager  # reward.* beside legacy nulls
    assert cfg.reward_model.num_workers == 8 and cfg.reward_model.enable is False
    assert cfg.reward_model.model.path == "~/models/FsfairX-LLaMA3-RM-v0.1"  # null in both spellings: the default
    assert cfg.reward_model.sandbox_fusion.max_concurrent == 64
    assert cfg.custom_reward_function.name == "compute_score"
    assert cfg.critic.model.fsdp_config.param_offload is True  # critic.fsdp
    assert cfg.critic.model.tokenizer_path == "~/models/Qwen3-8B"  # null: keeps following the actor
    assert cfg.actor_rollout_ref.rollout.n_gpus_per_node == 8 and cfg.actor_rollout_ref.rollout.trace.project_name == "verl_examples"
    assert cfg.actor_rollout_ref.rollout.qat["mode"] == "w4a16"
    assert cfg.distillation.teacher_models["teacher_model"]["inference"]["name"] == "sglang"  # resolved as written
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 4 and cfg.model_engine == "dp"


def test_printed_config_loads_back_to_the_same_config(tmp_path):
    cfg = load_config(config_file=str(FIXTURES / "verl_aug_dump.yaml"))
    path = tmp_path / "printed.yaml"
    path.write_text(config_to_yaml(cfg))
    assert load_config(config_file=str(path)) == cfg


def test_command_line_wins_over_a_dumped_spelling(tmp_path):
    dump = FIXTURES / "verl_jan_dump.yaml"
    cfg = load_config(["reward_manager.name=prime"], config_file=str(dump))
    assert cfg.reward_manager.name == "prime" == cfg.reward_model.reward_manager
    cfg = load_config(["actor_rollout_ref.actor.optim.clip_grad=0.5"], config_file=str(dump))
    assert cfg.actor_rollout_ref.actor.grad_clip == 0.5


def test_one_source_setting_both_spellings_differently_is_an_error(tmp_path):
    path = tmp_path / "both.yaml"
    path.write_text("reward_model:\n  reward_manager: dapo\nreward_manager:\n  name: prime\n")
    with pytest.raises(ConfigError, match="reward_model.reward_manager='dapo' and reward_manager.name='prime' are two "
                                          "spellings of one setting"):
        load_config(config_file=str(path))
    path.write_text("reward_model:\n  reward_manager: dapo\nreward_manager:\n  name: ${reward_model.reward_manager}\n")
    assert load_config(config_file=str(path)).reward_manager.name == "dapo"  # equal once resolved
