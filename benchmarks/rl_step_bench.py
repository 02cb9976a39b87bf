"""A full RL step (GRPO + KL loss): hybridrl's PPOTrainer (hybrid and separate memory modes) vs TRL's
GRPOTrainer, on a Qwen2.5-0.5B-shaped model; prints one JSON object.

    python benchmarks/rl_step_bench.py --out rl_step.json   # H200: 64 GSM8K prompts x n=8 x 256 tokens
    python benchmarks/rl_step_bench.py --quick              # toy shapes on CPU (< 90 s)
See benchmarks/README.md ("rl_step_bench.py") for the workload, the modes and every output field.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks import rl_step_hybridrl, rl_step_trl  # noqa: E402
from benchmarks.common import (GSM8K_64, H200_BANDWIDTH, H200_BF16_FLOPS, emit, environment,  # noqa: E402
                               fill_defaults, kv_bytes_per_token, qwen2_config)
from benchmarks.rl_step_setup import gsm8k_rows, prompt_lengths, write_model_dir  # noqa: E402

RUNS = ("hybrid", "hybrid_offload", "separate", "trl")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy model and sizes (CPU, < 90 s)")
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--only", default=",".join(RUNS), help=f"comma list of runs out of {RUNS}")
    parser.add_argument("--gsm8k", default=str(GSM8K_64), help="jsonl with GSM8K question/answer rows")
    parser.add_argument("--num-prompts", type=int, default=None, help="default 64 (quick: 4)")
    parser.add_argument("--n", type=int, default=None, help="responses per prompt, default 8 (quick: 2)")
    parser.add_argument("--response-length", type=int, default=None, help="forced tokens, default 256 (quick: 8)")
    parser.add_argument("--micro-batch", type=int, default=None, help="rows per forward/backward, default 64 (quick: 4)")
    parser.add_argument("--steps", type=int, default=3, help="RL steps per run (the first is warm-up)")
    parser.add_argument("--warmup-steps", type=int, default=1, help="steps left out of the steady-state means")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--kl-coef", type=float, default=0.001)
    parser.add_argument("--no-grad-ckpt", action="store_true", help="turn gradient checkpointing off (both)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="where the model dir and data go (default: a temp dir)")
    parser.add_argument("--hybridrl-override", action="append", default=[], help="extra verl override (repeatable)")
    parser.add_argument("--profile", default=None,
                        help="hybrid mode: a folder for torch.profiler tables and traces of one extra step, per phase and "
                             "process (global_profiler with discrete=true)")
    parser.add_argument("--one-rank-group", action="store_true",
                        help="one device: run the roles in a one-rank worker group (a spawned process) instead of in "
                             "the controller, to time what being a rank costs against the in-process default")
    args = parser.parse_args(argv)
    args.device = args.device or ("cpu" if args.quick or not torch.cuda.is_available() else "cuda")
    fill_defaults(args, dict(num_prompts=4, n=2, response_length=8, micro_batch=4),
                  dict(num_prompts=64, n=8, response_length=256, micro_batch=64))
    args.runs = [r for r in args.only.split(",") if r]
    unknown = set(args.runs) - set(RUNS)
    if unknown or (args.num_prompts * args.n) % args.micro_batch:
        parser.error(f"--only takes {RUNS} (got {sorted(unknown)}); --micro-batch must divide prompts x n")
    # bf16 weights for both trainers, like for like (the default is fp32 master + bf16 compute); fp32 on CPU.
    args.dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    args.train_dtype = "fp32" if args.dtype == torch.float32 else "bf16"
    return args


def roofline(config, num_seqs: int, prompt_len: float, response_len: int) -> dict[str, Any]:
    """perf.md §4.2 ceilings on one H200 (790 TF/s bf16, 4.3 TB/s) for this step; no overheads."""
    d, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    head_dim = d // config.num_attention_heads
    attn = d * (config.num_attention_heads + 2 * config.num_key_value_heads) * head_dim + d * d
    n_body = layers * (attn + 3 * d * config.intermediate_size)
    tokens = num_seqs * (prompt_len + response_len)
    forward = 2 * n_body * tokens + 2 * vocab * d * num_seqs * response_len  # LM head on responses only
    weight_bytes = 2 * (n_body + vocab * d)
    kv = kv_bytes_per_token(config, torch.bfloat16)
    gen = response_len * (weight_bytes + kv * num_seqs * (prompt_len + response_len / 2)) / H200_BANDWIDTH
    phases = {"gen_s": gen, "old_and_ref_log_prob_s": 2 * forward / H200_BF16_FLOPS,
              "update_actor_s": 4 * forward / H200_BF16_FLOPS}  # fwd + 2x bwd + checkpoint recompute
    step = sum(phases.values())
    return {**phases, "step_s": step, "tokens_per_s": tokens / step,
            "formula": "gen: R*(weight_bytes + kv_bytes_per_token*B*(P+R/2))/4.3e12; forward = 2*N_body*B*(P+R) + "
                       "2*V*d*B*R; log-prob = 2 forwards (old, ref) / 790e12; update = 4 forwards (grad ckpt)"}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def comparison(results: dict[str, Any]) -> dict[str, Any]:
    hybrid = results.get("hybridrl", {}).get("hybrid", {})
    separate = results.get("hybridrl", {}).get("separate", {})
    trl = results.get("trl", {})
    peak = lambda r: (r.get("peak_memory_gb") or {}).get("perf/max_memory_allocated_gb")  # noqa: E731
    offload = results.get("hybridrl", {}).get("hybrid_offload", {})
    return {"hybridrl_over_trl_tokens_per_s": ratio(hybrid.get("tokens_per_s"), trl.get("tokens_per_s")),
            "trl_over_hybridrl_step_s": ratio(trl.get("step_s"), hybrid.get("step_s")),
            "hybrid_over_h200_roofline_tokens_per_s": ratio(hybrid.get("tokens_per_s"),
                                                            results["roofline"]["tokens_per_s"])
            if results["environment"]["device"] == "cuda" else None,
            "peak_memory_gb": {"hybrid": peak(hybrid), "hybrid_offload": peak(offload), "separate": peak(separate),
                               "trl": trl.get("peak_memory_gb")},
            "hybrid_over_separate_peak": ratio(peak(hybrid), peak(separate)),
            "hybrid_offload_over_separate_peak": ratio(peak(offload), peak(separate))}


def workload(args, config, lengths: list[int]) -> dict[str, Any]:
    rows = args.num_prompts * args.n
    return {"model": {k: getattr(config, k) for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                      "num_attention_heads", "num_key_value_heads",
                                                      "intermediate_size", "tie_word_embeddings")},
            "dtype": str(args.dtype), "num_prompts": args.num_prompts, "n": args.n, "num_sequences": rows,
            "response_length": args.response_length, "micro_batch": args.micro_batch, "steps": args.steps,
            "warmup_steps": args.warmup_steps, "lr": args.lr, "kl_coef": args.kl_coef,
            "gradient_checkpointing": not args.no_grad_ckpt, "gpu_memory_utilization": args.gpu_memory_utilization,
            "hybridrl_overrides": list(args.hybridrl_override), "one_rank_group": args.one_rank_group,
            "prompt_tokens": {"mean": sum(lengths) / len(lengths), "min": min(lengths), "max": max(lengths)},
            "tokens_per_step": args.n * sum(lengths) + rows * args.response_length}


def prepare(args, work: Path) -> tuple[dict[str, Path], list[dict], Any, list[int]]:
    """Model dir (random weights), stand-in tokenizer dir and the training parquet, under `work`."""
    from hybridrl.data.parquet import write_parquet

    config = qwen2_config(quick=args.quick)
    rows = gsm8k_rows(args.num_prompts, args.gsm8k)
    paths = {"work": work, "model": work / "model", "tokenizer": work / "tokenizer", "train": work / "train.parquet"}
    tokenizer = write_model_dir(paths["model"], paths["tokenizer"], config, rows, args.dtype, args.seed)
    write_parquet(rows, paths["train"])
    lengths = prompt_lengths(tokenizer, rows)
    args.max_prompt_length = max(lengths)  # hybridrl pads to this; TRL pads to the longest prompt: the same
    return paths, rows, config, lengths


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rl_step_bench_", dir=args.workdir) as tmp:
        paths, rows, config, lengths = prepare(args, Path(tmp))
        results: dict[str, Any] = {"workload": workload(args, config, lengths),
                                   "environment": environment(args.device), "hybridrl": {}}
        results["roofline"] = roofline(config, args.num_prompts * args.n, sum(lengths) / len(lengths),
                                       args.response_length)
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON only (HF Trainer prints its logs)
            for mode in rl_step_hybridrl.MODES:
                if mode in args.runs:
                    results["hybridrl"][mode] = rl_step_hybridrl.run(args, paths, mode)
            if "trl" in args.runs:
                results["trl"] = rl_step_trl.run(args, paths, rows, args.dtype)
    results["comparison"] = comparison(results)
    emit(results, args.out)
    return results


if __name__ == "__main__":
    main()
