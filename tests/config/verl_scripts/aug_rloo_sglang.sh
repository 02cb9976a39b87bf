#!/usr/bin/env bash
# expect: pass
# train: MODEL_PATH TRAIN_FILE TEST_FILE (2 steps on CPU, tiny model)
# RLOO | FSDP | SGLang spelling, the reward.* group of verl's August-2026 tree
set -xeuo pipefail

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B}
train_batch_size=${TRAIN_BATCH_SIZE:-512}
mini_batch_size=${MINI_BATCH_SIZE:-128}
micro_batch_size=${MICRO_BATCH_SIZE:-16}

ARGS=(
    algorithm.adv_estimator=rloo
    algorithm.use_kl_in_reward=True
    algorithm.kl_penalty=low_var_kl
    algorithm.kl_ctrl.kl_coef=0.001
    data.train_files="${TRAIN_FILE:-$HOME/data/gsm8k/train.parquet}"
    data.val_files="${TEST_FILE:-$HOME/data/gsm8k/test.parquet}"
    data.train_batch_size=${train_batch_size}
    data.max_prompt_length=${MAX_PROMPT_LENGTH:-1024}
    data.max_response_length=${MAX_RESPONSE_LENGTH:-2048}
    actor_rollout_ref.model.path="$MODEL_PATH"
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.ppo_mini_batch_size=${mini_batch_size}
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=${micro_batch_size}
    actor_rollout_ref.actor.fsdp_config.entropy_from_logits_chunk_size=2048
    actor_rollout_ref.rollout.name=sglang
    actor_rollout_ref.rollout.n=${ROLLOUT_N:-8}
    actor_rollout_ref.rollout.tensor_model_parallel_size=${ROLLOUT_TP:-1}
    actor_rollout_ref.rollout.gpu_memory_utilization=0.7
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=${micro_batch_size}
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=${micro_batch_size}
    +actor_rollout_ref.rollout.engine_kwargs.sglang.disable_radix_cache=False
    +actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=flashinfer
    reward.reward_manager.name=naive
    reward.custom_reward_function.name=compute_score
    trainer.use_v1=True
    trainer.v1.trainer_mode=sync
    trainer.logger='["console"]'
    trainer.project_name=verl_rloo
    trainer.experiment_name=qwen3_4b_rloo
    trainer.n_gpus_per_node=${NGPUS_PER_NODE:-8}
    trainer.nnodes=1
    trainer.test_freq=5
    trainer.total_epochs=10
)

python3 -m verl.trainer.main_ppo "${ARGS[@]}" "$@"
