#!/usr/bin/env bash
# expect: pass
set -xeuo pipefail

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$HOME/data/gsm8k/train.parquet" \
    data.val_files="$HOME/data/gsm8k/test.parquet" \
    data.train_batch_size=256 \
    actor_rollout_ref.model.path=Qwen/Qwen3-0.6B \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=4 \
    distillation.enabled=True \
    distillation.n_gpus_per_node=8 \
    distillation.nnodes=1 \
    distillation.distillation_loss.loss_mode=k3 \
    distillation.distillation_loss.use_task_rewards=False \
    distillation.teacher_models.teacher_model.key=openai/gsm8k \
    distillation.teacher_models.teacher_model.model_path=Qwen/Qwen3-8B \
    distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1 \
    distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.3 \
    trainer.logger='["console"]' \
    trainer.n_gpus_per_node=8 "$@"
