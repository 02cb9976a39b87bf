# expect: pass
# train: MODEL_PATH TRAIN_FILE TEST_FILE (2 steps on CPU, tiny model)
set -xeuo pipefail

CONFIG_PATH="$(cd "$(dirname "$0")" && pwd)/config"

python3 -m verl.trainer.main_ppo \
    --config-path="$CONFIG_PATH" \
    --config-name='grpo_recipe' \
    data.train_files="${TRAIN_FILE:-$HOME/data/gsm8k/train.parquet}" \
    data.val_files="${TEST_FILE:-$HOME/data/gsm8k/test.parquet}" \
    data.train_batch_size=${TRAIN_BATCH_SIZE:-512} \
    data.max_prompt_length=${MAX_PROMPT_LENGTH:-512} \
    data.max_response_length=${MAX_RESPONSE_LENGTH:-1024} \
    actor_rollout_ref.model.path="${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}" \
    actor_rollout_ref.actor.ppo_mini_batch_size=${MINI_BATCH_SIZE:-128} \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=${MICRO_BATCH_SIZE:-8} \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=${MICRO_BATCH_SIZE:-8} \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=${MICRO_BATCH_SIZE:-8} \
    actor_rollout_ref.rollout.n=${ROLLOUT_N:-8} \
    trainer.n_gpus_per_node=${NGPUS_PER_NODE:-8} \
    trainer.logger='[console]' "$@"
