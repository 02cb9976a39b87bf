"""Asynchronous training (trainer.v1.trainer_mode=colocate_async) vs the synchronous trainer on a long-tail
workload, in one run on one device; prints one JSON object.

    python benchmarks/async_bench.py --out async.json   # H200: 64 GSM8K prompts x n=8, EOS-stopped, <= 2048 tokens
    python benchmarks/async_bench.py --quick             # toy shapes on CPU
    python benchmarks/async_bench.py --modes sync,colocate_async,colocate_async_kept_kv   # + parked KV kept
    python benchmarks/async_bench.py --modes sync_split,separate_async   # two GPUs: actor on 0, rollout on 1
    python benchmarks/async_bench.py --table a.json b.json               # the markdown table of benchmarks/README.md
The long tail: random "EOS" ids (rollout_bench's stop-id emulation) give the random-weight model geometric
response lengths, median ~300 tokens, capped at --max-response-length. The synchronous step waits for its
longest response; colocate_async cuts the step once a train batch of groups has finished, parks the rest
(tokens kept) and resumes it after the weight sync (colocate_async_kept_kv: from the KV kept across the sync,
actor_rollout_ref.rollout.recompute_kv_cache_after_weight_updates=false). The trainers run GRPO + KL loss, the same data, seeds and
token budgets; each reports tokens/s and the step-time breakdown over the steps after --warmup-steps. See
benchmarks/README.md ("async_bench.py").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks import rl_step_hybridrl  # noqa: E402
from benchmarks.common import GSM8K_64, emit, environment, fill_defaults, print_tables  # noqa: E402
from benchmarks.rl_step_bench import prepare  # noqa: E402
from benchmarks.rollout_bench import stop_ids_for_mean_length  # noqa: E402

MODES = ("sync", "colocate_async", "colocate_async_kept_kv", "sync_split", "separate_async")
DEFAULT_MODES = ("sync", "colocate_async")  # one device; the split pair needs two (device 0 trains, 1 generates)
SPLIT_MODES = {"sync_split": "sync", "separate_async": "separate_async"}
TRAINER_MODES = {**SPLIT_MODES, "colocate_async_kept_kv": "colocate_async"}
# each asynchronous mode: its name in `comparison` and the synchronous mode it is measured against
BASELINES = {"colocate_async": ("async", "sync"), "colocate_async_kept_kv": ("kept_kv", "sync"),
             "separate_async": ("separate", "sync_split")}
PHASES = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights")
OFF_POLICY = ("training/off_policy/trajectory_staleness/mean", "training/off_policy/trajectory_staleness_worst/max",
              "training/off_policy/trajectory_spans/mean", "fully_async/partial/partial_ratio",
              "training/off_policy/evicted_samples", "response_length/mean", "response_length/max",
              "fully_async/trainer/idle_ratio", "fully_async/rollouter/idle_ratio",
              "training/rollout_log_probs_diff_mean", "rollout_corr/log_ppl_abs_diff", "rollout_corr/kl")
# trained tokens (prompts and responses) and the engine's generated tokens, in-flight requests' included: a
# step of an asynchronous mode trains fewer tokens than it generates until its in-flight inventory is full
TRAINED, GENERATED = "perf/total_num_tokens", "rollout/num_generated_tokens"
PER_STEP = ("timing_s/step", "timing_s/gen", TRAINED, GENERATED, "response_length/mean", "rollout/mean_decode_rows")
MEDIAN_OVER_MEAN = 0.69  # geometric lengths: median = ln 2 x mean


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy model and sizes (CPU)")
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES),
                        help=f"comma list out of {MODES}; the last two place the actor on device 0 and the rollout "
                             "on device 1 (two GPUs, or two CPU ranks)")
    parser.add_argument("--gsm8k", default=str(GSM8K_64), help="jsonl with GSM8K question/answer rows")
    parser.add_argument("--num-prompts", type=int, default=None, help="train batch, default 64 (quick: 4)")
    parser.add_argument("--n", type=int, default=None, help="responses per prompt, default 8 (quick: 2)")
    parser.add_argument("--max-response-length", type=int, default=None, help="cap, default 2048 (quick: 32)")
    parser.add_argument("--median-length", type=int, default=None, help="median response, default 300 (quick: 6)")
    parser.add_argument("--token-budget", type=int, default=None,
                        help="tokens per micro-batch (use_dynamic_bsz), default 16384 (quick: 512)")
    parser.add_argument("--steps", type=int, default=None, help="measured steps per mode, default 8 (quick: 2)")
    parser.add_argument("--warmup-steps", type=int, default=1, help="steps before them, left out of the figures")
    parser.add_argument("--threshold", type=int, default=2, help="trainer.v1.sampler.max_off_policy_threshold")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--kl-coef", type=float, default=0.001)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="where the model dir and data go (default: a temp dir)")
    parser.add_argument("--hybridrl-override", action="append", default=[], help="extra verl override (repeatable)")
    parser.add_argument("--table", nargs="+", default=None, metavar="JSON",
                        help="print the markdown table of reports this script wrote (benchmarks/README.md) and exit")
    args = parser.parse_args(argv)
    args.device = args.device or ("cpu" if args.quick or not torch.cuda.is_available() else "cuda")
    fill_defaults(args, dict(num_prompts=4, n=2, max_response_length=32, median_length=6, token_budget=512, steps=2),
                  dict(num_prompts=64, n=8, max_response_length=2048, median_length=300, token_budget=16384, steps=8))
    args.modes = [m for m in args.modes.split(",") if m]
    if set(args.modes) - set(MODES):
        parser.error(f"--modes takes {MODES} (got {args.modes})")
    args.dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    args.train_dtype = "fp32" if args.dtype == torch.float32 else "bf16"
    # what rl_step_hybridrl.overrides reads: the cap as the response length, row micro-batches unused
    args.response_length, args.micro_batch, args.no_grad_ckpt = args.max_response_length, args.num_prompts * args.n, False
    return args


def long_tail(paths: dict[str, Path], config, args) -> dict[str, Any]:
    """Random stop ids added to the model's EOS ids (its generation_config.json, which the engine reads)."""
    mean = max(1, round(args.median_length / MEDIAN_OVER_MEAN))
    stop_ids = [i for i in stop_ids_for_mean_length(config.vocab_size, mean, args.seed)
                if i not in (config.pad_token_id, config.bos_token_id)]
    gen_path = paths["model"] / "generation_config.json"
    gen = json.loads(gen_path.read_text())
    gen["eos_token_id"] = sorted({config.eos_token_id, *stop_ids})
    gen_path.write_text(json.dumps(gen, indent=2))
    return {"emulation": f"{len(stop_ids)} random stop ids of {config.vocab_size} (p(stop) ~ "
                         f"{len(stop_ids) / config.vocab_size:.4f} per token: geometric lengths, mean ~{mean})",
            "max_response_length": args.max_response_length, "median_target": args.median_length}


def overrides(args, paths: dict[str, Path], mode: str) -> list[str]:
    """rl_step_bench's GRPO + KL workload with EOS kept, token-budget micro-batches, and the trainer mode."""
    arr, budget = "actor_rollout_ref", args.token_budget
    base = [o for o in rl_step_hybridrl.overrides(args, paths, "hybrid")
            if not o.startswith((f"{arr}.rollout.ignore_eos", "trainer.total_training_steps", "trainer.default_local_dir",
                                 f"{arr}.rollout.max_num_seqs", "trainer.n_gpus_per_node"))]
    trainer_mode = TRAINER_MODES.get(mode, mode)
    # the engine may run every sequence admitted: one batch's rows in sync, up to threshold batches' in async
    in_flight = args.num_prompts * args.n * (1 if trainer_mode == "sync" else args.threshold)
    placement = (["trainer.n_gpus_per_node=2", f"{arr}.actor.device_ids=[0]", f"{arr}.rollout.device_ids=[1]",
                  "trainer.v1.separate_async.parameter_sync_step=1"]  # mini batch = train batch: one sync a step
                 if mode in SPLIT_MODES else ["trainer.n_gpus_per_node=1"])
    kept_kv = [f"{arr}.rollout.recompute_kv_cache_after_weight_updates=false"] if mode == "colocate_async_kept_kv" else []
    return base + placement + kept_kv + [
        f"{arr}.rollout.max_num_seqs={in_flight}", f"{arr}.rollout.ignore_eos=false", f"trainer.total_training_steps={args.warmup_steps + args.steps}",
        f"trainer.default_local_dir={paths['work'] / mode}", f"{arr}.actor.use_dynamic_bsz=true",
        f"{arr}.actor.ppo_max_token_len_per_gpu={budget}", f"{arr}.rollout.log_prob_max_token_len_per_gpu={budget}",
        f"{arr}.ref.log_prob_max_token_len_per_gpu={budget}", f"trainer.v1.trainer_mode={trainer_mode}",
        f"trainer.v1.sampler.max_off_policy_threshold={args.threshold}",
    ]


def run(args, paths: dict[str, Path], mode: str) -> dict[str, Any]:
    """One trainer of `mode`: its steps' metrics, summarized after the warm-up."""
    from hybridrl.config import load_config
    from hybridrl.trainer.main_ppo import make_trainer

    start = time.perf_counter()
    trainer = make_trainer(load_config(overrides(args, paths, mode)))
    build_s = time.perf_counter() - start
    steps: list[dict[str, float]] = []
    run_step = trainer.run_step

    def recorded(prompts):
        metrics = run_step(prompts)
        steps.append(metrics)  # the dict itself: the step's end adds keys to it (separate_async's idle ratios)
        return metrics

    trainer.run_step = recorded
    trainer.fit()
    result = rl_step_hybridrl.summarize(steps, args.warmup_steps)
    steady = steps[args.warmup_steps:] or steps
    result["phases_s"] = {p: sum(s.get(f"timing_s/{p}", 0.0) for s in steady) / len(steady) for p in PHASES}
    result["tokens_per_s_last_half"] = later_half_per_s(steady, TRAINED)
    result["generated_tokens_per_s"] = per_s(steady, GENERATED)
    result["generated_tokens_per_s_last_half"] = later_half_per_s(steady, GENERATED)
    result["per_step"] = {key: [s.get(key, 0.0) for s in steps] for key in PER_STEP}
    result.update({k: sum(s[k] for s in steady) / len(steady) for k in OFF_POLICY if k in steady[-1]})
    result["build_s"] = build_s
    del trainer
    rl_step_hybridrl.release_memory()
    return result


def per_s(steps: list[dict[str, float]], key: str) -> float:
    """`key` summed over `steps` per second of their step time."""
    return sum(s.get(key, 0.0) for s in steps) / sum(s["timing_s/step"] for s in steps)


def later_half_per_s(steps: list[dict[str, float]], key: str) -> float:
    """`per_s` over the later half of `steps` (the middle step with it when their count is odd): the
    asynchronous modes' steps grow while the groups in flight accumulate, and the later half shows the plateau."""
    return per_s(steps[len(steps) // 2:], key)


def comparison(runs: dict[str, Any]) -> dict[str, float]:
    """Each asynchronous mode over the synchronous trainer on the same devices (goal: 1.3x)."""
    out: dict[str, float] = {"goal": 1.3}
    for fast, (name, base) in BASELINES.items():
        if fast in runs and base in runs:
            out[f"{name}_over_sync_tokens_per_s"] = runs[fast]["tokens_per_s"] / runs[base]["tokens_per_s"]
            out[f"{name}_over_sync_tokens_per_s_median"] = runs[fast]["tokens_per_s_median"] / runs[base]["tokens_per_s_median"]
            for key in ("tokens_per_s_last_half", "generated_tokens_per_s", "generated_tokens_per_s_last_half"):
                if key in runs[fast] and key in runs[base]:
                    out[f"{name}_over_sync_{key}"] = runs[fast][key] / runs[base][key]
    return out


def markdown_table(reports: list[dict[str, Any]]) -> str:
    """One row per mode of each report: its threshold, tokens/s and step time (medians), the step-time
    breakdown, the engine's prefill and decode, staleness, the engine-trainer log-prob gap, and the mode over
    its synchronous baseline: by mean tokens/s (by the median step), over the later half of the measured
    steps, and by the engine's generated tokens/s (in-flight tokens included) over the later half ("-" in
    reports from before each was recorded)."""
    lines = ["| threshold | mode | tokens/s (median) | step s (median) | gen s | ref s | update_actor s | prefill "
             "tokens | prefill s | decode s (steps) | staleness mean | log-prob gap | over sync (median) | "
             "over sync, later half | generated over sync, later half |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for report in reports:
        for mode, run in report["runs"].items():
            phases = run["phases_s"]
            lines.append(
                f"| {report['workload']['max_off_policy_threshold']} | {mode} | {run['tokens_per_s_median'] / 1e3:.1f}k"
                f" | {run['step_s_median']:.2f} | {phases['gen']:.2f} | {phases['ref']:.2f} | "
                f"{phases['update_actor']:.2f} | {run['rollout/prefill_tokens'] / 1e3:.1f}k | "
                f"{run['rollout/prefill_time_s']:.2f} | {run['rollout/decode_time_s']:.2f} "
                f"({run['rollout/decode_steps']:.0f}) | {_cell(run.get('training/off_policy/trajectory_staleness/mean'))}"
                f" | {_cell(run.get('training/rollout_log_probs_diff_mean'), '.4f')} | "
                f"{_ratio_cell(report['comparison'], mode)} | {_late_ratio_cell(report['comparison'], mode)} | "
                f"{_late_ratio_cell(report['comparison'], mode, 'generated_tokens_per_s_last_half')} |")
    return "\n".join(lines)


def _cell(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _late_ratio_cell(comparison: dict[str, float], mode: str, key: str = "tokens_per_s_last_half") -> str:
    name = BASELINES[mode][0] if mode in BASELINES else None
    return _cell(comparison.get(f"{name}_over_sync_{key}"))


def _ratio_cell(comparison: dict[str, float], mode: str) -> str:
    name = BASELINES[mode][0] if mode in BASELINES else None
    ratio = comparison.get(f"{name}_over_sync_tokens_per_s")
    if ratio is None:
        return "-"
    return f"{ratio:.2f} ({comparison[f'{name}_over_sync_tokens_per_s_median']:.2f})"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.table:
        return print_tables(args.table, markdown_table)
    with tempfile.TemporaryDirectory(prefix="async_bench_", dir=args.workdir) as tmp:
        paths, _, config, lengths = prepare(args, Path(tmp))
        results: dict[str, Any] = {
            "workload": {"num_prompts": args.num_prompts, "n": args.n, "steps": args.steps,
                         "warmup_steps": args.warmup_steps, "max_off_policy_threshold": args.threshold,
                         "token_budget": args.token_budget, "dtype": str(args.dtype),
                         "prompt_tokens_mean": sum(lengths) / len(lengths), **long_tail(paths, config, args),
                         "hybridrl_overrides": list(args.hybridrl_override)},
            "environment": environment(args.device), "runs": {}}
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON only
            for mode in args.modes:
                results["runs"][mode] = run(args, paths, mode)
    results["comparison"] = comparison(results["runs"])
    emit(results, args.out)
    return results


if __name__ == "__main__":
    main()
