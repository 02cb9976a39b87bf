#!/bin/bash
# Issue #6's two-GPU measurements in one call (nvidia-h200-x2, an estimated 5-6 minutes), reports under $OUT:
#   g1              one GPU, in process (the base)
#   g2_replicas     two ranks, actor and reference whole on each (fsdp_size=1: gradients all-reduced)
#   g2_fsdp         two ranks, FSDP2 over both
#   g2_tp2          two ranks, FSDP2, the rollout tensor-parallel over both GPUs (TP=2 decode)
#   split           actor on GPU 0, rollout on GPU 1 (weights broadcast each step), per-phase times, then
#                   GPU 0 lent to the rollout at runtime (elastic_bench.py)
#   scaling.json    each 2-GPU run's speedup over g1 (scaling_summary.py; target 1.8x)
# Every rl_step run: 8 steps, the first 2 left out, medians of the other 6 (two-step runs are too noisy: see
# benchmarks/README.md, session 13). Usage: OUT=/some/dir bash benchmarks/two_gpu_suite.sh
# EXTRA is appended to every benchmark's arguments: EXTRA="--quick --device cpu --hybridrl-override
# actor_rollout_ref.rollout.name=hybrid" runs the same suite at toy size on two CPU processes (a dry run).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
OUT=${OUT:-benchmarks/results/two_gpu}
mkdir -p "$OUT"
T="--hybridrl-override reward_model.launch_reward_fn_async=true --hybridrl-override actor_rollout_ref.actor.use_dynamic_bsz=true --hybridrl-override actor_rollout_ref.actor.ppo_max_token_len_per_gpu=49152"
EXTRA=${EXTRA:-}
B="benchmarks/rl_step_bench.py --only hybrid --steps 8 --warmup-steps 2 $T $EXTRA"
TWO="--hybridrl-override trainer.n_gpus_per_node=2"
WHOLE="--hybridrl-override actor_rollout_ref.actor.fsdp_config.fsdp_size=1 --hybridrl-override actor_rollout_ref.ref.fsdp_config.fsdp_size=1"

run() {  # name, then the command's arguments; its log goes next to its report
  local name=$1; shift
  if "$@" > "$OUT/$name.log" 2>&1; then echo "$name: ok"; else echo "$name: FAILED (rc=$?)"; tail -15 "$OUT/$name.log"; fi
}
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
run g1 env CUDA_VISIBLE_DEVICES=0 python $B --out "$OUT/g1.json"
run g2_replicas python $B $TWO $WHOLE --out "$OUT/g2_replicas.json"
run g2_fsdp python $B $TWO --out "$OUT/g2_fsdp.json"
run g2_tp2 python $B $TWO --hybridrl-override actor_rollout_ref.rollout.tensor_model_parallel_size=2 --out "$OUT/g2_tp2.json"
run split python benchmarks/elastic_bench.py $T $EXTRA --out "$OUT/split.json"
runs=()
for name in g2_replicas g2_fsdp g2_tp2; do [ -f "$OUT/$name.json" ] && runs+=("$name=$OUT/$name.json"); done
[ -f "$OUT/g1.json" ] && [ ${#runs[@]} -gt 0 ] && python benchmarks/scaling_summary.py --base "$OUT/g1.json" --gpus 2 \
  "${runs[@]}" --out "$OUT/scaling.json" | python -c "
import json, sys
s = json.load(sys.stdin)
print('g1', round(s['base']['tokens_per_s_median']), 'tokens/s')
for name, r in s['runs'].items():
    print(name, round(r['tokens_per_s_median']), 'tokens/s', f\"{r['speedup']:.3f}x\", {k: round(v['run'], 3) for k, v in r['phases_s'].items()})
"
