"""The decode step's GEMMs at decode batch sizes: how much of their time is a per-kernel floor that half the
rows (a rank of two GPUs) does not halve.

    python benchmarks/decode_gemm_bench.py --out decode_gemm.json   # H200: Qwen2.5-0.5B's five GEMMs
    python benchmarks/decode_gemm_bench.py --quick                  # toy shapes on CPU (smoke run)

Each GEMM of a decoder layer (q/k/v, o, gate/up, down) and the LM head, at each of `--rows`, as the engine
runs it (`F.linear(x, W)`, bf16) and transposed (`W @ x^T`, which gives cuBLAS the other tiling). On CUDA
each is timed from CUDA-graph replays of `--reps` back-to-back calls (launch cost out), with cuBLASLt
and with cuBLAS. Back-to-back calls keep a weight that fits in L2 (50 MB on an H200) there, so the
times are a floor for the engine's, where other layers' weights pass through L2 in between.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit, environment, qwen2_config  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy shapes on CPU")
    parser.add_argument("--rows", default=None, help="comma list of batch sizes (default 128,256,512; quick: 4,8)")
    parser.add_argument("--reps", type=int, default=50, help="calls per timed graph (CUDA)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.rows = [int(r) for r in (args.rows or ("4,8" if args.quick else "128,256,512")).split(",")]
    return args


def gemm_shapes(quick: bool) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each decode GEMM of the benchmark model."""
    c = qwen2_config(quick)
    head_dim = c.hidden_size // c.num_attention_heads
    qkv = (c.num_attention_heads + 2 * c.num_key_value_heads) * head_dim
    return {"qkv": (c.hidden_size, qkv), "o": (c.hidden_size, c.hidden_size),
            "gate_up": (c.hidden_size, 2 * c.intermediate_size), "down": (c.intermediate_size, c.hidden_size),
            "lm_head": (c.hidden_size, c.vocab_size)}


def time_us(fn: Callable[[], Any], reps: int, device: torch.device) -> float:
    """Microseconds per call: CUDA-graph replays of `reps` calls on CUDA, a wall-clock loop on CPU."""
    fn()
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - start) * 1e6 / reps
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) * 1e3 / (5 * reps)


def measure(shapes: dict[str, tuple[int, int]], rows: list[int], reps: int, device: torch.device,
            dtype: torch.dtype) -> dict[str, dict[str, float]]:
    """{"<rows> <gemm>": {"linear": us, "transposed": us}} for the current BLAS library."""
    out = {}
    for m in rows:
        for name, (k, n) in shapes.items():
            x = torch.randn(m, k, device=device, dtype=dtype)
            w = torch.randn(n, k, device=device, dtype=dtype)
            out[f"{m} {name}"] = {"linear": round(time_us(lambda: F.linear(x, w), reps, device), 2),
                                  "transposed": round(time_us(lambda: torch.mm(w, x.t()), reps, device), 2)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    device = torch.device("cpu" if args.quick or not torch.cuda.is_available() else "cuda")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shapes = gemm_shapes(args.quick)
    libraries = ("cublaslt", "cublas") if device.type == "cuda" else ("cpu",)
    times = {}
    for library in libraries:
        if device.type == "cuda":
            torch.backends.cuda.preferred_blas_library(library)
        times[library] = measure(shapes, args.rows, args.reps if device.type == "cuda" else 3, device, dtype)
    result = {"environment": environment(str(device)), "shapes": shapes, "rows": args.rows, "dtype": str(dtype),
              "us_per_call": times}
    emit(result, args.out)
    return result


if __name__ == "__main__":
    main()
