"""The decode step's sampler on a real vocabulary: the fused Triton kernel against the torch path it mirrors.

    python benchmarks/sampler_bench.py --out sampler.json
    python benchmarks/sampler_bench.py --baseline-file old_sampling_kernel.py --out sampler.json
    python benchmarks/sampler_bench.py --sweep --out sampler_sweep.json   # block / splits / warps

Times `sampling_kernel.fused_sample` (one pass over bf16 logits: log-sum-exp, Gumbel-max, log-prob) and
`sampler.sample` (the torch path, eager) at each row count, replayed from CUDA graphs over two copies of
the logits (each copy exceeds the 50 MB L2 at 256 rows). `--baseline-file`: another version of
sampling_kernel.py (e.g. `git show REV:hybridrl/rollout/engine/sampling_kernel.py`), timed in the same run
and checked for the same tokens. Also reports how many tokens the fused kernel and torch agree on (they
may differ at near-ties, by float rounding) and the largest log-prob difference.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit, environment, graph_us  # noqa: E402
from hybridrl.rollout.engine.sampler import row_key, sample  # noqa: E402

VOCAB = 151936  # Qwen2.5


def load_kernel_file(path: str):
    spec = importlib.util.spec_from_file_location("baseline_sampling_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(rows: int, copies: int = 2) -> dict[str, Any]:
    gen = torch.Generator(device="cuda").manual_seed(rows)
    logits = [torch.randn(rows, VOCAB, device="cuda", generator=gen).mul_(3).bfloat16() for _ in range(copies)]
    keys = torch.tensor([row_key(0, r) for r in range(rows)], dtype=torch.int64, device="cuda")
    steps = torch.randint(0, 512, (rows,), device="cuda", generator=gen)
    return {"logits": logits, "keys": keys, "steps": steps, "temperature": torch.ones(1, device="cuda"),
            "greedy": torch.zeros(1, dtype=torch.int32, device="cuda")}


def fused_call(kernel_module, case: dict[str, Any], **knobs):
    tokens = torch.empty(case["keys"].shape[0], dtype=torch.int64, device="cuda")
    logprobs = torch.empty(case["keys"].shape[0], dtype=torch.float32, device="cuda")

    def call(i: int):
        return kernel_module.fused_sample(case["logits"][i], case["keys"], case["steps"], case["temperature"],
                                          case["greedy"], tokens, logprobs, **knobs)
    return call


def measure(rows: int, kernels: dict[str, Any]) -> dict[str, Any]:
    case = inputs(rows)
    copies = len(case["logits"])
    report: dict[str, Any] = {}
    want_tokens, want_logprobs = sample(case["logits"][0], 1.0, -1, 1.0, False, case["keys"], case["steps"])
    for name, module in kernels.items():
        call = fused_call(module, case)
        tokens, logprobs = (t.clone() for t in call(0))
        report[f"{name}_us"] = round(graph_us(call, copies, reps=20), 2)
        report[f"{name}_tokens_agree_with_torch"] = (tokens == want_tokens).float().mean().item()
        report[f"{name}_max_logprob_diff"] = (logprobs - want_logprobs).abs().max().item()
    report["torch_us"] = round(graph_us(lambda i: sample(case["logits"][i], 1.0, -1, 1.0, False, case["keys"],
                                                        case["steps"]), copies, reps=5), 2)
    report["logits_mb"] = rows * VOCAB * 2 / 1e6
    return report


def sweep(rows: int, module) -> list[dict[str, Any]]:
    """`fused_sample` over its tuning knobs, fastest first."""
    case = inputs(rows)
    tried = []
    for block_v, max_splits, num_warps in itertools.product((512, 1024, 2048, 4096), (8, 16, 32, 64), (4, 8, 16)):
        if block_v < 32 * num_warps:
            continue
        call = fused_call(module, case, block_v=block_v, max_splits=max_splits, num_warps=num_warps)
        us = graph_us(call, len(case["logits"]), reps=20)
        tried.append({"block_v": block_v, "max_splits": max_splits, "num_warps": num_warps, "us": round(us, 2)})
    return sorted(tried, key=lambda t: t["us"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="256,512", help="comma list of row counts")
    parser.add_argument("--baseline-file", default=None, help="another sampling_kernel.py to time side by side")
    parser.add_argument("--sweep", action="store_true", help="also time the fused kernel's tuning knobs")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from hybridrl.rollout.engine import sampling_kernel

    kernels = {"fused": sampling_kernel}
    if args.baseline_file:
        kernels["baseline"] = load_kernel_file(args.baseline_file)
    row_counts = [int(rows) for rows in args.rows.split(",")]
    result = {"benchmark": "sampler", "vocab": VOCAB, "environment": environment("cuda"),
              "defaults": {"block_v": sampling_kernel.BLOCK_V, "max_splits": sampling_kernel.SPLITS,
                           "num_warps": sampling_kernel.NUM_WARPS},
              "rows": {str(rows): measure(rows, kernels) for rows in row_counts}}
    if args.sweep:
        result["sweep_fastest_first"] = {str(rows): sweep(rows, sampling_kernel)[:12] for rows in row_counts}
    emit(result, args.out)


if __name__ == "__main__":
    main()
