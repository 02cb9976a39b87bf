"""Decode CUDA graphs kept across sleep (keep_decode_graphs=true) vs captured again after every wake-up (false).

The hybrid loop as the trainer runs it, on a Qwen2.5-0.5B-shaped model with random weights: per round,
wake_up (the KV cache comes back), generate, sleep (the cache is freed), then the "trainer" allocates and
frees a tensor the size of the cache, so its memory is really used by someone else in between. Two
workloads: forced lengths (every sequence decodes `--response-length` tokens: one batch size) and varied
lengths (random stop ids, geometric lengths capped at `--varied-max-len`: the batch passes through many
sizes, as real rollouts with EOS do). Both modes run in the same process, one after the other; prints one
JSON object (medians over the rounds after the first, which captures in both modes).

    python benchmarks/graph_reuse_bench.py --out results/graph_reuse_h200.json
    python benchmarks/graph_reuse_bench.py --quick   # toy model, CPU-sized
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import (build_random_model, emit, environment, fill_defaults, gsm8k_prompts,  # noqa: E402
                               qwen2_config, timed)
from benchmarks.rollout_bench import release_memory, stop_ids_for_mean_length  # noqa: E402
from hybridrl.rollout.base import SamplingParams  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy model and sizes")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--num-prompts", type=int, default=None, help="default 64 (quick: 4)")
    parser.add_argument("--n", type=int, default=None, help="samples per prompt, default 8 (quick: 2)")
    parser.add_argument("--response-length", type=int, default=None, help="forced tokens, default 256 (quick: 8)")
    parser.add_argument("--varied-max-len", type=int, default=None, help="default 512 (quick: 16)")
    parser.add_argument("--rounds", type=int, default=4, help="wake/generate/sleep rounds per mode and workload")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    fill_defaults(args, {"num_prompts": 4, "n": 2, "response_length": 8, "varied_max_len": 16},
                  {"num_prompts": 64, "n": 8, "response_length": 256, "varied_max_len": 512})
    if args.rounds < 2:
        parser.error("--rounds must be >= 2 (the first round captures in both modes)")
    return args


def workloads(vocab_size: int, args: argparse.Namespace) -> dict[str, SamplingParams]:
    stop_ids = stop_ids_for_mean_length(vocab_size, int(args.varied_max_len * 0.4), args.seed)
    return {
        "forced_length": SamplingParams(n=args.n, max_new_tokens=args.response_length, ignore_eos=True,
                                        seed=args.seed),
        "varied_length": SamplingParams(n=args.n, max_new_tokens=args.varied_max_len,
                                        eos_token_ids=tuple(stop_ids), seed=args.seed),
    }


def free_while_asleep(device: str) -> float | None:
    return torch.cuda.mem_get_info(device)[0] / 2**30 if torch.device(device).type == "cuda" else None


def one_round(engine, prompts: list[list[int]], params: SamplingParams, device: str) -> dict[str, Any]:
    seconds: dict[str, float] = {}
    with timed(device, seconds, "wake_up_s"):
        engine.wake_up()
    with timed(device, seconds, "generate_s"):
        out = engine.generate(prompts, params)
    with timed(device, seconds, "sleep_s"):
        engine.sleep()
    free_gb = free_while_asleep(device)
    trainer = torch.empty(engine.kv_cache_bytes, dtype=torch.uint8, device=device)  # the memory is reused
    trainer.fill_(255)
    del trainer
    return {**seconds, "graph_capture_s": out.metrics["rollout/graph_capture_s"],
            "decode_time_s": out.metrics["rollout/decode_time_s"],
            "generated_tokens": sum(map(len, out.token_ids)), "free_gb_while_asleep": free_gb,
            "token_ids_hash": hash(tuple(map(tuple, out.token_ids)))}


def run_mode(model, prompts, args, keep: bool, params: SamplingParams) -> dict[str, Any]:
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    longest = max(map(len, prompts)) + max(args.response_length, args.varied_max_len)
    engine = LLMEngine(model, dtype=model.dtype, device=args.device, max_num_seqs=len(prompts) * args.n,
                       max_model_len=longest, gpu_memory_utilization=args.gpu_memory_utilization,
                       seed=args.seed, keep_decode_graphs=keep)
    engine.sleep()  # as the rollout worker leaves it after construction
    rounds = [one_round(engine, prompts, params, args.device) for _ in range(args.rounds)]
    result = {"rounds": rounds, "kv_cache_gb": engine.kv_cache_bytes / 2**30,
              "stable_address": engine.runner.kv_store.stable_address,
              "graphs_held_gb_while_asleep": engine.runner.graph_runner.held_bytes / 2**30}
    steady = rounds[1:]
    for key in ("generate_s", "graph_capture_s", "wake_up_s", "sleep_s"):
        result[f"{key}_median"] = statistics.median(r[key] for r in steady)
    result["tokens_per_s_median"] = statistics.median(r["generated_tokens"] / r["generate_s"] for r in steady)
    del engine
    release_memory()
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    config = qwen2_config(quick=args.quick)
    dtype = torch.bfloat16 if torch.device(args.device).type == "cuda" else torch.float32
    model = build_random_model(config, dtype, args.device, seed=args.seed)
    prompts = gsm8k_prompts(config.vocab_size, args.num_prompts)
    report: dict[str, Any] = {
        "benchmark": "graph_reuse", "quick": args.quick, "environment": environment(args.device),
        "workload": {"model": "Qwen2.5-0.5B shape, random weights" if not args.quick else "toy Qwen2",
                     "num_prompts": len(prompts), "n": args.n, "response_length": args.response_length,
                     "varied_max_len": args.varied_max_len, "rounds": args.rounds},
    }
    for name, params in workloads(config.vocab_size, args).items():
        modes = {f"keep_graphs_{keep}": run_mode(model, prompts, args, keep, params) for keep in (True, False)}
        kept, recaptured = modes["keep_graphs_True"], modes["keep_graphs_False"]
        modes["generate_speedup"] = recaptured["generate_s_median"] / kept["generate_s_median"]
        # The same seed every round: kept graphs must sample what freshly captured ones do.
        modes["same_tokens"] = len({r["token_ids_hash"] for r in kept["rounds"] + recaptured["rounds"]}) == 1
        report[name] = modes
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
