#!/usr/bin/env bash
# expect: pass
set -xeuo pipefail

ARGS=(
    algorithm.adv_estimator=grpo
    algorithm.filter_groups.enable=True
    algorithm.filter_groups.metric=acc
    algorithm.filter_groups.max_num_gen_batches=10
    data.train_files="$HOME/data/dapo-math-17k.parquet"
    data.val_files="$HOME/data/aime-2024.parquet"
    data.train_batch_size=512
    data.gen_batch_size=1536
    data.max_prompt_length=2048
    data.max_response_length=8192
    actor_rollout_ref.model.path=Qwen/Qwen3-8B-Base
    actor_rollout_ref.actor.clip_ratio_high=0.28
    actor_rollout_ref.actor.loss_agg_mode=token-mean
    actor_rollout_ref.actor.ppo_mini_batch_size=32
    actor_rollout_ref.actor.use_dynamic_bsz=True
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n=16
    reward.reward_manager.name=dapo
    reward.reward_kwargs.overlong_buffer_cfg.enable=True
    reward.reward_kwargs.overlong_buffer_cfg.len=4096
    reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0
    reward.reward_kwargs.overlong_buffer_cfg.log=False
    reward.reward_kwargs.max_resp_len=8192
    trainer.logger='["console"]'
    trainer.n_gpus_per_node=8
)
python3 -m verl.trainer.main_ppo "${ARGS[@]}" "$@"
