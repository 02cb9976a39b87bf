#!/usr/bin/env bash
# expect: refused the Megatron, TorchTitan, VeOmni and fsdp_turbo engines are not implemented
set -xeuo pipefail

ARGS=(
    model_engine=megatron
    algorithm.adv_estimator=grpo
    data.train_files="$HOME/data/gsm8k/train.parquet"
    data.val_files="$HOME/data/gsm8k/test.parquet"
    data.train_batch_size=1024
    actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B
    actor_rollout_ref.actor.ppo_mini_batch_size=256
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4
    actor_rollout_ref.actor.megatron.expert_model_parallel_size=8
    actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=full
    actor_rollout_ref.actor.optim.lr_decay_style=cosine
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n=8
    trainer.logger='["console"]'
    trainer.n_gpus_per_node=8
    trainer.nnodes=2
)
python3 -m verl.trainer.main_ppo "${ARGS[@]}" "$@"
