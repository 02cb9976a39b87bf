"""Multi-turn rollout throughput: trajectories that pause for tool calls vs the same tokens generated single-turn.

A Qwen2.5-0.5B-shaped model with random weights, 64 GSM8K prompts x n=8 trajectories, all through the
engine's request API (its asyncio front end, one coroutine per trajectory), in one run:
- multi-turn: a turn decodes until a "tool call" ends it (random stop ids: near-uniform random-weight logits
  give geometric turn lengths of mean --turn-mean-tokens, capped at --turn-max-tokens); a fake tool waits
  --tool-latency-ms and appends --observation-tokens tokens; the next turn's prompt is the conversation so
  far (token ids, append-only: its earlier turns come from the prefix cache). Up to --max-tool-rounds tool
  calls, then a last turn; --response-length tokens per trajectory in all (generated and observation).
- single-turn: each trajectory's generated-token count as one request from its first prompt (no stops),
  so both sides generate exactly the same number of tokens per trajectory.
Each side runs once at full size as a warm-up (another seed), then --repeats times, alternating with the
other side, each timed on an empty prefix cache (the run of the median wall is reported, with every wall);
the pair is repeated for each decode-burst length of --decode-bursts (a row whose turn ends inside a burst
decodes the rest of it, and the burst queued behind it, as junk before its next turn can join: shorter
bursts waste less there, longer ones launch less from the host per token). The goal is read on the engine's
default burst length (LLMEngine's max_decode_burst) against the fastest single-turn run. Generated tok/s counts sampled tokens only.
Goal (issue #29): multi-turn >= 80% of single-turn.

    python benchmarks/multiturn_bench.py --out results/multiturn_h200.json   # H200
    python benchmarks/multiturn_bench.py --quick --device cpu               # toy shapes, CPU smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import (GSM8K_64, build_random_model, emit, environment, fill_defaults,  # noqa: E402
                               gsm8k_prompts, peak_memory_gb, qwen2_config, reset_peak_memory, timed)
from benchmarks.rollout_bench import length_stats, release_memory, stop_ids_for_mean_length  # noqa: E402
from hybridrl.rollout.base import SamplingParams  # noqa: E402
from hybridrl.rollout.engine.llm_engine import DEFAULT_DECODE_BURST  # noqa: E402

GOAL = 0.8  # multi-turn generated tok/s over single-turn (issue #29)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy model and sizes (CPU, < 60 s)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--gsm8k", default=str(GSM8K_64), help="jsonl with GSM8K 'question' rows")
    parser.add_argument("--num-prompts", type=int, default=None, help="default 64 (quick: 4)")
    parser.add_argument("--n", type=int, default=None, help="trajectories per prompt, default 8 (quick: 2)")
    parser.add_argument("--response-length", type=int, default=None,
                        help="tokens per trajectory, generated and observation, default 1024 (quick: 48)")
    parser.add_argument("--max-tool-rounds", type=int, default=4, help="tool calls per trajectory at most")
    parser.add_argument("--turn-mean-tokens", type=int, default=None,
                        help="mean tokens of a turn before its tool call, default 96 (quick: 6)")
    parser.add_argument("--turn-max-tokens", type=int, default=None, help="a turn's cap, default 256 (quick: 16)")
    parser.add_argument("--observation-tokens", type=int, default=None,
                        help="tokens a tool call appends, default 16 (quick: 3)")
    parser.add_argument("--tool-latency-ms", type=float, default=0.0, help="the fake tool's wait per call")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--decode-bursts", default=None,
                        help="comma-separated max_decode_burst values, one engine each; a 'u' suffix (16u) runs that "
                             "engine with queue_bursts=False; default 8,16 (quick: 8,4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed (multi-turn, single-turn) pairs per engine after the warm-up, default 3 (quick: 1); "
                             "the median run is reported")
    parser.add_argument("--host-timeline", action="store_true",
                        help="time the engine's host-side methods and the engine thread's waits per timed side "
                             "(benchmarks/host_timeline.py)")
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="sys.setswitchinterval for the run (seconds; Python's default is 0.005)")
    parser.add_argument("--table", default=None, metavar="JSON",
                        help="print the markdown table of a report this script wrote (benchmarks/README.md) and exit")
    parser.add_argument("--profile", default=None,
                        help="write a torch.profiler table (top kernels by device time) of one multi-turn side here")
    args = parser.parse_args(argv)
    fill_defaults(args, dict(num_prompts=4, n=2, response_length=48, turn_mean_tokens=6, turn_max_tokens=16,
                             observation_tokens=3, repeats=1),
                  dict(num_prompts=64, n=8, response_length=1024, turn_mean_tokens=96, turn_max_tokens=256,
                       observation_tokens=16, repeats=3))
    args.decode_bursts = (args.decode_bursts or ("8,4" if args.quick else "8,16")).split(",")
    args.dtype = torch.float32 if args.quick and args.device == "cpu" else torch.bfloat16
    return args


def observation(trajectory: int, tool_round: int, length: int, vocab_size: int) -> list[int]:
    """The fake tool's answer: deterministic ids per (trajectory, round), clear of the reserved low ids."""
    return [16 + (trajectory * 7919 + tool_round * 104729 + k * 31) % (vocab_size - 16) for k in range(length)]


async def multi_turn(engine, trajectory: int, prompt: list[int], stop_ids: tuple[int, ...], seed: int,
                     args: argparse.Namespace, vocab_size: int) -> dict[str, int]:
    """One trajectory: turns ended by a tool call (a stop id), each answered by observation tokens."""
    ids, used, generated, tool_calls = list(prompt), 0, 0, 0
    for turn in range(args.max_tool_rounds + 1):
        params = SamplingParams(max_new_tokens=min(args.turn_max_tokens, args.response_length - used),
                                ignore_eos=True, stop_token_ids=stop_ids, seed=seed, row_offset=trajectory)
        out = await engine.generate(f"{seed}/{trajectory}/{turn}", ids, params)
        ids += out.token_ids
        used += len(out.token_ids)
        generated += len(out.token_ids)
        room = args.response_length - used - args.observation_tokens
        if out.stop_reason != "stop" or turn == args.max_tool_rounds or room < 1:
            break
        if args.tool_latency_ms:
            await asyncio.sleep(args.tool_latency_ms / 1000)
        ids += observation(trajectory, turn, args.observation_tokens, vocab_size)
        used += args.observation_tokens
        tool_calls += 1
    return {"generated": generated, "turns": turn + 1, "tool_calls": tool_calls}


async def single_turn(engine, trajectory: int, prompt: list[int], num_tokens: int, seed: int) -> dict[str, int]:
    params = SamplingParams(max_new_tokens=num_tokens, ignore_eos=True, seed=seed, row_offset=trajectory)
    out = await engine.generate(f"single/{seed}/{trajectory}", prompt, params)
    return {"generated": len(out.token_ids), "turns": 1, "tool_calls": 0}


TIMELINE = None  # a HostTimeline while --host-timeline is on


def timed_side(llm, rows: list, device: str) -> dict[str, Any]:
    """Run the coroutines of one side to the end on an empty prefix cache; wall time and engine metrics."""
    llm.sleep()  # sleep + wake_up empties the prefix cache: the warm-up's turns must not hit
    llm.wake_up()
    front = llm.request_engine()
    front_metrics = asyncio.run(front.take_metrics())  # start the count here

    async def run_all():
        return await asyncio.gather(*rows)

    times: dict[str, float] = {}
    reset_peak_memory(device)
    if TIMELINE is not None:
        TIMELINE.reset()
    with timed(device, times, "wall_s"):
        results = asyncio.run(run_all())
    timeline = TIMELINE.snapshot() if TIMELINE is not None else None
    metrics = asyncio.run(front.take_metrics())
    del front_metrics
    generated = [r["generated"] for r in results]
    return {"wall_s": times["wall_s"], "generated_tokens": sum(generated), "gen_tok_s": sum(generated) / times["wall_s"],
            "num_trajectories": len(results), "generated_per_trajectory": length_stats(generated),
            "turns": length_stats([r["turns"] for r in results]), "tool_calls": sum(r["tool_calls"] for r in results),
            "device_busy_fraction": (metrics["rollout/prefill_time_s"] + metrics["rollout/decode_time_s"])
            / times["wall_s"], "peak_memory_gb": peak_memory_gb(device), "metrics": metrics,
            "per_trajectory": generated, **({"host_timeline": timeline} if timeline else {})}


def run_pair(llm, prompts: list[list[int]], stop_ids: tuple[int, ...], seed: int, args, vocab_size: int
             ) -> dict[str, Any]:
    """Multi-turn with `seed`, then single-turn with the same per-trajectory token counts."""
    front = llm.request_engine()
    trajectories = [p for p in prompts for _ in range(args.n)]
    multi = timed_side(llm, [multi_turn(front, i, p, stop_ids, seed, args, vocab_size)
                             for i, p in enumerate(trajectories)], args.device)
    single = timed_side(llm, [single_turn(front, i, p, multi["per_trajectory"][i], seed)
                              for i, p in enumerate(trajectories)], args.device)
    if single["per_trajectory"] != multi["per_trajectory"]:
        raise RuntimeError("single-turn generated other token counts than multi-turn; the comparison is void")
    return {"multi_turn": multi, "single_turn": single}


def profile_multi_turn(llm, prompts, stop_ids: tuple[int, ...], args, vocab_size: int) -> None:
    """torch.profiler over one multi-turn side: the top ops by device time to `args.profile`. CUPTI records
    the kernels of every thread; host ops only of this one (the engine loop steps on a worker thread)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    front = llm.request_engine()
    trajectories = [p for p in prompts for _ in range(args.n)]
    with profile(activities=activities) as prof:
        side = timed_side(llm, [multi_turn(front, i, p, stop_ids, args.seed + 2, args, vocab_size)
                                for i, p in enumerate(trajectories)], args.device)
    averages = prof.key_averages()
    device_key = "cuda_time_total" if ProfilerActivity.CUDA in activities else "cpu_time_total"
    with open(args.profile, "w") as f:
        f.write(f"== multi-turn side under the profiler: wall {side['wall_s']:.2f} s, metrics {side['metrics']}\n")
        f.write(f"== sorted by {device_key}\n{averages.table(sort_by=device_key, row_limit=40)}\n")


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of the median wall time (the lower middle one of an even count), with every run's wall."""
    ordered = sorted(runs, key=lambda run: run["wall_s"])
    return {**ordered[(len(ordered) - 1) // 2], "wall_s_repeats": [run["wall_s"] for run in runs]}


def run_name(burst: str) -> str:
    return f"burst_{burst[:-1]}_unqueued" if burst.endswith("u") else f"burst_{burst}"


def one_burst_length(model, prompts, stop_ids, args, vocab_size: int, burst: str) -> dict[str, Any]:
    """An engine decoding `burst` steps per host round trip ('16u': without queueing a burst behind the one in
    flight): the warm-up pair, then the timed pair."""
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    llm = LLMEngine(model, dtype=args.dtype, device=args.device, max_num_seqs=len(prompts) * args.n,
                    max_model_len=max(map(len, prompts)) + args.response_length,
                    gpu_memory_utilization=args.gpu_memory_utilization, seed=args.seed,
                    max_decode_burst=int(burst.rstrip("u")), queue_bursts=not burst.endswith("u"))
    warmup = run_pair(llm, prompts, stop_ids, args.seed + 1, args, vocab_size)
    pairs = [run_pair(llm, prompts, stop_ids, args.seed, args, vocab_size) for _ in range(args.repeats)]
    result = {side: median_run([pair[side] for pair in pairs]) for side in ("multi_turn", "single_turn")}
    if args.profile and burst == args.decode_bursts[0]:
        profile_multi_turn(llm, prompts, stop_ids, args, vocab_size)
    llm.sleep()
    llm.request_engine().close()
    del llm
    release_memory()
    for side in (*warmup.values(), *result.values()):
        side.pop("per_trajectory")
    return {**result, "multi_over_single": result["multi_turn"]["gen_tok_s"] / result["single_turn"]["gen_tok_s"],
            "warmup": {side: {k: warmup[side][k] for k in ("wall_s", "gen_tok_s")} for side in warmup}}


def host_timeline(enabled: bool):
    """A HostTimeline patched in for the runs (`--host-timeline`), else a context that yields None."""
    if not enabled:
        return contextlib.nullcontext()
    from benchmarks.host_timeline import HostTimeline

    return HostTimeline.for_request_engine()


def markdown_table(report: dict[str, Any]) -> str:
    """One row per engine of a report: the ratios, median walls (with every repeat) and the multi-turn side's
    prefill, decode and host figures."""
    lines = ["| engine | multi / its single | multi / fastest single | multi wall s | single wall s | prefill s "
             "(steps, graphed) | decode s (steps) | engine thread waits s | device busy |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, run in report["runs"].items():
        multi, single = run["multi_turn"], run["single_turn"]
        m, timeline = multi["metrics"], multi.get("host_timeline", {})
        waits = timeline.get("engine thread waits between steps", {}).get("s")
        lines.append(
            f"| {name} | {run['multi_over_single']:.3f} | {run['multi_over_best_single']:.3f} | "
            f"{_walls(multi)} | {_walls(single)} | {m['rollout/prefill_time_s']:.2f} "
            f"({m['rollout/prefill_steps']:.0f}, {m.get('rollout/prefill_steps_graphed', 0):.0f}) | "
            f"{m['rollout/decode_time_s']:.2f} ({m['rollout/decode_steps']:.0f}) | "
            f"{'-' if waits is None else f'{waits:.2f}'} | {multi['device_busy_fraction']:.2f} |")
    return "\n".join(lines)


def _walls(side: dict[str, Any]) -> str:
    repeats = side.get("wall_s_repeats")
    if not repeats or len(repeats) == 1:
        return f"{side['wall_s']:.2f}"
    return f"{side['wall_s']:.2f} ({', '.join(f'{w:.2f}' for w in repeats)})"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    global TIMELINE
    args = parse_args(argv)
    if args.table:
        with open(args.table) as f:
            report = json.load(f)
        print(markdown_table(report))
        return report
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    config = qwen2_config(quick=args.quick)
    model = build_random_model(config, args.dtype, args.device, seed=args.seed)
    prompts = gsm8k_prompts(config.vocab_size, args.num_prompts, args.gsm8k)
    stop_ids = tuple(stop_ids_for_mean_length(config.vocab_size, args.turn_mean_tokens, args.seed))
    with host_timeline(args.host_timeline) as TIMELINE:
        runs = {run_name(b): one_burst_length(model, prompts, stop_ids, args, config.vocab_size, b)
                for b in args.decode_bursts}
    TIMELINE = None
    best_single = max(run["single_turn"]["gen_tok_s"] for run in runs.values())
    for run in runs.values():
        run["multi_over_best_single"] = run["multi_turn"]["gen_tok_s"] / best_single
    best = max(runs, key=lambda name: runs[name]["multi_over_best_single"])
    report = {
        "benchmark": "multiturn", "quick": args.quick, "environment": environment(args.device),
        "workload": {"model": "Qwen2.5-0.5B shape, random weights" if not args.quick else "toy Qwen2",
                     "dtype": str(args.dtype), "num_prompts": len(prompts), "n": args.n,
                     "response_length": args.response_length, "max_tool_rounds": args.max_tool_rounds,
                     "turn_mean_tokens": args.turn_mean_tokens, "turn_max_tokens": args.turn_max_tokens,
                     "observation_tokens": args.observation_tokens, "tool_latency_ms": args.tool_latency_ms,
                     "repeats": args.repeats, "switch_interval_s": sys.getswitchinterval(),
                     "tool_call_emulation": f"{len(stop_ids)} random stop ids of {config.vocab_size}",
                     "prompt_length": length_stats(list(map(len, prompts)))},
        "runs": runs,
        # the default engine (LLMEngine's max_decode_burst) against the fastest single-turn engine, and the best
        "multi_over_single": runs.get(run_name(str(DEFAULT_DECODE_BURST)), runs[best])["multi_over_best_single"],
        "best": {"run": best, "multi_over_best_single": runs[best]["multi_over_best_single"]},
        "goal": GOAL,
    }
    report["meets_goal"] = report["multi_over_single"] >= GOAL
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
