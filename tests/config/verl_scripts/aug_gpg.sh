#!/usr/bin/env bash
# expect: pass
set -xeuo pipefail

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=gpg \
    actor_rollout_ref.actor.policy_loss.loss_mode=gpg \
    data.train_files="$HOME/data/gsm8k/train.parquet" \
    data.val_files="$HOME/data/gsm8k/test.parquet" \
    data.train_batch_size=1024 \
    actor_rollout_ref.model.path=Qwen/Qwen3-8B \
    actor_rollout_ref.actor.ppo_mini_batch_size=256 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=5 \
    trainer.logger='["console"]' \
    trainer.n_gpus_per_node=8 "$@"
