"""verl's GSM8K GRPO example command line, unchanged except the rollout engine name."""

from __future__ import annotations

import shlex

import pytest

from hybridrl.config import load_config, validate_config

VERL_GSM8K_GRPO = """
algorithm.adv_estimator=grpo data.train_files=$HOME/data/gsm8k/train.parquet data.val_files=$HOME/data/gsm8k/test.parquet
data.train_batch_size=1024 data.max_prompt_length=512 data.max_response_length=1024 data.filter_overlong_prompts=True
data.truncation='error' actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct actor_rollout_ref.actor.optim.lr=1e-6
actor_rollout_ref.model.use_remove_padding=True actor_rollout_ref.actor.ppo_mini_batch_size=256
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40 actor_rollout_ref.actor.use_kl_loss=True
actor_rollout_ref.actor.kl_loss_coef=0.001 actor_rollout_ref.actor.kl_loss_type=low_var_kl actor_rollout_ref.actor.entropy_coeff=0
actor_rollout_ref.model.enable_gradient_checkpointing=True actor_rollout_ref.actor.fsdp_config.param_offload=False
actor_rollout_ref.actor.fsdp_config.optimizer_offload=False actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40
actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.name=vllm
actor_rollout_ref.rollout.gpu_memory_utilization=0.6 actor_rollout_ref.rollout.n=5
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=40 actor_rollout_ref.ref.fsdp_config.param_offload=True
algorithm.use_kl_in_reward=False trainer.critic_warmup=0 trainer.logger='["console","wandb"]'
trainer.project_name='verl_grpo_example_gsm8k' trainer.experiment_name='qwen2_7b_function_rm' trainer.n_gpus_per_node=8
trainer.nnodes=1 trainer.save_freq=20 trainer.test_freq=5 trainer.total_epochs=15
"""


def argv() -> list[str]:
    # shlex does what the shell does to the quotes; $HOME stays literal, which is fine for a path string
    return shlex.split(VERL_GSM8K_GRPO)


def test_loads_and_validates_unchanged():
    cfg = load_config(argv())
    arr = cfg.actor_rollout_ref
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.data.train_batch_size == 1024
    assert cfg.data.truncation == "error" and cfg.data.filter_overlong_prompts is True
    assert arr.actor.optim.lr == pytest.approx(1e-6) and arr.actor.entropy_coeff == 0.0
    assert arr.rollout.name == "auto" and arr.rollout.n == 5 and arr.rollout.gpu_memory_utilization == 0.6
    assert arr.rollout.response_length == 1024  # follows data.max_response_length
    assert arr.ref.fsdp_config.param_offload is True and arr.ref.fsdp_config.forward_only is True
    assert cfg.trainer.logger == ["console", "wandb"] and cfg.trainer.project_name == "verl_grpo_example_gsm8k"
    assert cfg.trainer.default_local_dir == "checkpoints/verl_grpo_example_gsm8k/qwen2_7b_function_rm"
    validate_config(cfg, world_size=8)  # 256 x 5 / 8 = 160 rows per device, micro 40 divides it
