"""The two-GPU link as the RL step uses it: collective bandwidth at the step's sizes, and what overlapping
FSDP all-gathers cost the update's compute kernels.

    python benchmarks/collective_bench.py --out collectives.json    # 2 GPUs, NCCL (NCCL_* env is recorded)
    python benchmarks/collective_bench.py --quick                   # 2 gloo CPU ranks, toy sizes (smoke run)

Sizes come from the Qwen2.5-0.5B shape of rl_step_bench: one decoder layer's bf16 parameters (FSDP2's
all-gather unit in forward, recompute and weight sync), the same layer's fp32 gradients (reduce-scatter,
or all-reduce with `fsdp_size=1`) and the whole model's bf16 weights. Each collective: median of `--iters`
after warm-ups; bus bandwidth = bytes x (world - 1) / world / time, as nccl-tests reports it.

Contention (CUDA only): the update's attention forward (cuDNN SDPA at a micro-batch's padded shape,
122 x 415 tokens, GQA heads repeated as HF does) and its MLP GEMM, timed alone and again while a side
stream runs back-to-back layer all-gathers, as FSDP2's prefetch does during the update.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit, environment, model_shapes, qwen2_config, sync  # noqa: E402
from hybridrl.distributed import LocalWorkerGroup  # noqa: E402

WORLD = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="gloo on CPU, toy sizes")
    parser.add_argument("--out", default=None)
    return parser.parse_args(argv)


def step_sizes(quick: bool) -> dict[str, int]:
    """Element counts of the step's collectives for the benchmark model: one decoder layer, the whole model."""
    shapes = model_shapes(quick)
    numel = {name: torch.Size(shape).numel() for name, shape in shapes.items()}
    return {"layer": sum(n for name, n in numel.items() if name.startswith("model.layers.0.")),
            "model": sum(numel.values())}


def timed_ms(fn: Callable[[], None], iters: int, device: torch.device) -> float:
    """Median wall milliseconds of `fn` (synchronised), after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(iters):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _sync(device: torch.device) -> None:
    sync(device)
    dist.barrier()


def collectives(sizes: dict[str, int], iters: int, device: torch.device) -> dict[str, Any]:
    """Median time and bus bandwidth of each of the step's collectives."""
    cases = {
        "all_gather_layer_bf16": ("all_gather", sizes["layer"], torch.bfloat16),
        "all_gather_model_bf16": ("all_gather", sizes["model"], torch.bfloat16),
        "reduce_scatter_layer_fp32": ("reduce_scatter", sizes["layer"], torch.float32),
        "all_reduce_layer_fp32": ("all_reduce", sizes["layer"], torch.float32),
    }
    report = {}
    for name, (op, numel, dtype) in cases.items():
        numel -= numel % WORLD
        full = torch.ones(numel, dtype=dtype, device=device)
        shard = torch.ones(numel // WORLD, dtype=dtype, device=device)
        run = _collective(op, full, shard)
        ms = timed_ms(run, iters, device)
        nbytes = full.numel() * full.element_size()
        factor = 2 if op == "all_reduce" else 1  # an all-reduce moves twice: reduce-scatter + all-gather
        report[name] = {"mb": round(nbytes / 1e6, 2), "ms": round(ms, 3),
                        "bus_gb_s": round(factor * nbytes * (WORLD - 1) / WORLD / (ms / 1e3) / 1e9, 2)}
    return report


def _collective(op: str, full: torch.Tensor, shard: torch.Tensor) -> Callable[[], None]:
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(full, shard)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(shard, full)
    return lambda: dist.all_reduce(full)


def contention(sizes: dict[str, int], iters: int, device: torch.device) -> dict[str, Any]:
    """Per-call milliseconds of the update's attention forward and MLP GEMM, alone and beside a side
    stream of layer all-gathers."""
    config = qwen2_config()
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    rows, width = 122, 415
    q, k, v = (torch.randn(rows, heads, width, head_dim, device=device, dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(width, width, device=device, dtype=torch.bool).tril()[None, None].expand(rows, 1, -1, -1)
    x = torch.randn(rows * width, config.hidden_size, device=device, dtype=torch.bfloat16)
    w = torch.randn(config.hidden_size, 2 * config.intermediate_size, device=device, dtype=torch.bfloat16)
    kernels = {"attention_fwd": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
               "mlp_gate_up_gemm": lambda: x @ w}
    numel = sizes["layer"] - sizes["layer"] % WORLD
    full = torch.empty(numel, dtype=torch.bfloat16, device=device)
    shard = torch.ones(numel // WORLD, dtype=torch.bfloat16, device=device)
    report = {}
    for name, kernel in kernels.items():
        alone = _per_call_ms(kernel, iters * 10, device)
        side = torch.cuda.Stream(device)
        with torch.cuda.stream(side):
            for _ in range(iters * 40):  # outlasts the kernels' calls on a fast link too
                dist.all_gather_into_tensor(full, shard)
        overlapped = _per_call_ms(kernel, iters * 10, device, wait=False)
        side.synchronize()
        report[name] = {"alone_ms": round(alone, 4), "beside_all_gathers_ms": round(overlapped, 4),
                        "slowdown": round(overlapped / alone, 3)}
        dist.barrier()
    return report


def _per_call_ms(kernel: Callable[[], Any], calls: int, device: torch.device, wait: bool = True) -> float:
    """Mean device milliseconds per call over `calls` back-to-back calls (CUDA events)."""
    kernel()
    if wait:
        torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        kernel()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


class CollectiveRank:
    """One rank of the benchmark (hybridrl's local launcher starts it with torch.distributed set up:
    NCCL on its own GPU, or gloo on CPU with --quick)."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.device = torch.device("cpu") if quick else torch.device("cuda", torch.cuda.current_device())

    def measure(self, iters: int) -> dict[str, Any]:
        sizes = step_sizes(self.quick)
        report: dict[str, Any] = {"sizes_elements": sizes, "collectives": collectives(sizes, iters, self.device)}
        if not self.quick:
            report["contention"] = contention(sizes, iters, self.device)
        return report


def link_topology() -> str | None:
    """`nvidia-smi topo -m` (how the GPUs are linked), or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if not args.quick and torch.cuda.device_count() < WORLD:
        raise SystemExit(f"needs {WORLD} CUDA devices, found {torch.cuda.device_count()}; --quick runs on CPU")
    group = LocalWorkerGroup(CollectiveRank, {"quick": args.quick}, world_size=WORLD, role="collective_bench",
                             device_ids=None if args.quick else list(range(WORLD)))
    try:
        report = group.call_all("measure", args.iters)[0]  # rank 0's timings
    finally:
        group.shutdown()
    result = {"benchmark": "collective_bench", "world_size": WORLD,
              "backend": "gloo" if args.quick else "nccl",
              "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
              "topology": link_topology(), **report,
              "environment": environment("cpu" if args.quick else "cuda:0")}
    emit(result, args.out)
    return result


if __name__ == "__main__":
    main()
