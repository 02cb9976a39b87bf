"""Two ways around the decode step's per-kernel floor at 256 rows (a rank of two GPUs), measured on an H200.

    python benchmarks/decode_floor_probes.py --probe gemm --out splitk.json      # Triton split-K vs cuBLAS
    python benchmarks/decode_floor_probes.py --probe streams --out streams.json  # rows over k CUDA streams

- `gemm`: each decoder GEMM of Qwen2.5-0.5B at 256 and 512 rows, cuBLAS (`F.linear`) against a Triton
  split-K GEMM that writes fp32 partials for the next kernel to sum (so no separate reduce kernel), over a
  sweep of tiles and splits. Weights are cold in L2 as in the engine, where ~700 MB stream every step: each
  timed CUDA graph cycles through enough copies of the weight to exceed the 50 MB L2. The partials cost the
  consumer more reads; `partials_read_us_est` prices them at 3 TB/s.
- `streams`: the engine's decode forward (`ModelRunner.decode_fn`, LM head included, sampling not) for B rows
  in one CUDA graph, against B/k rows on each of k streams in one graph (independent forwards side by side,
  to fill the SMs the small GEMMs leave idle). Contexts of 240 tokens whose 112-token prompts are shared by
  8 rows, as in the RL step.
Both need CUDA; the split-K kernel runs on CPU under TRITON_INTERPRET=1 (tests).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit, environment, graph_us  # noqa: E402

SHAPES = {"qkv": (896, 1152), "o": (896, 896), "gate_up": (896, 9728), "down": (4864, 896)}  # (in, out)
CONTEXT, PROMPT, BLOCK, GROUP = 240, 112, 16, 8


@functools.lru_cache(maxsize=None)
def _kernel():  # one JITFunction (a fresh one per call would compile per launch)
    import triton
    import triton.language as tl

    @triton.jit
    def splitk_gemm_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_os, stride_om, k_per,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr):
        """out[s] = x[:, Ks] @ w[:, Ks].T for split s of K (fp32)."""
        pid_n, pid_m, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        k0 = pid_k * k_per
        x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :]
        w_ptrs = w_ptr + offs_n[None, :] * stride_wn + (k0 + offs_k)[:, None]
        m_ok, n_ok = offs_m[:, None] < M, offs_n[None, :] < N
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k in tl.range(0, k_per, BLOCK_K, num_stages=STAGES):
            k_ok = (k0 + k + offs_k) < K
            a = tl.load(x_ptrs, mask=m_ok & k_ok[None, :], other=0.0)
            b = tl.load(w_ptrs, mask=n_ok & k_ok[:, None], other=0.0)
            acc = tl.dot(a, b, acc)
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        tl.store(out_ptr + pid_k * stride_os + offs_m[:, None] * stride_om + offs_n[None, :], acc, mask=m_ok & n_ok)

    return splitk_gemm_kernel


def splits(k: int, block_k: int, split: int) -> tuple[int, int]:
    """(K columns per split, rounded to block_k; the number of non-empty splits)."""
    k_per = -(-(-(-k // split)) // block_k) * block_k
    return k_per, -(-k // k_per)


def splitk_gemm(x: torch.Tensor, w: torch.Tensor, block: tuple[int, int, int], split: int, stages: int = 3,
                warps: int = 4, out: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 partials (splits, M, N) of x @ w.T; their sum over dim 0 is the product."""
    (m, k), n = x.shape, w.shape[0]
    bm, bn, bk = block
    k_per, count = splits(k, bk, split)
    out = out if out is not None else torch.empty(count, m, n, device=x.device, dtype=torch.float32)
    grid = (-(-n // bn), -(-m // bm), count)
    _kernel()[grid](x, w, out, m, n, k, x.stride(0), w.stride(0), out.stride(0), out.stride(1), k_per,
                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages, num_warps=warps)
    return out


def probe_gemm(rows: list[int]) -> dict[str, Any]:
    configs = [c for c in itertools.product((64, 128), (64, 128), (64, 128), (1, 2, 4, 8), (3, 4))
               if c[:3] != (128, 128, 128)]  # needs more shared memory than an H200 SM has at these stages
    report = {}
    for name, (k, n) in SHAPES.items():
        copies = max(8, (160 << 20) // (k * n * 2))  # > 3x the L2 of weight bytes per graph
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 30 for _ in range(copies)]
        for m in rows:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            exact = F.linear(x, weights[0]).float()
            tried = []
            for bm, bn, bk, split, stages in configs:
                out = splitk_gemm(x, weights[0], (bm, bn, bk), split, stages)
                error = (out.sum(0) - exact).abs().max().item()
                us = graph_us(lambda i: splitk_gemm(x, weights[i], (bm, bn, bk), split, stages, out=out), copies)
                extra = (out.shape[0] * m * n * 4 - m * n * 2) / 3e6
                tried.append({"block_mnk": [bm, bn, bk], "split": split, "stages": stages, "us": round(us, 2),
                              "partials_read_us_est": round(extra, 2), "max_abs_error": error})
            tried.sort(key=lambda t: t["us"] + t["partials_read_us_est"])
            report[f"{m} {name}"] = {"cublas_us": round(graph_us(lambda i: F.linear(x, weights[i]), copies), 2),
                                     "triton_best": tried[:3]}
    return report


def shared_prompt_inputs(rows: int, first_block: int, device: str = "cpu") -> tuple[tuple[torch.Tensor, ...], int]:
    """Decode inputs for `rows` rows at position CONTEXT-1: groups of GROUP rows share their prompt's full
    blocks, each row owns the rest. Returns (input_ids, positions, block_tables, context_lens, slots) and the
    next free block."""
    shared, own = PROMPT // BLOCK, -(-(CONTEXT - PROMPT // BLOCK * BLOCK) // BLOCK)
    tables = torch.zeros(rows, shared + own, dtype=torch.int32)
    next_block = first_block
    for row in range(rows):
        if row % GROUP == 0:
            prompt_blocks, next_block = torch.arange(next_block, next_block + shared), next_block + shared
        tables[row, :shared] = prompt_blocks
        tables[row, shared:] = torch.arange(next_block, next_block + own)
        next_block += own
    position = CONTEXT - 1
    slots = tables[:, position // BLOCK].long() * BLOCK + position % BLOCK
    inputs = (torch.randint(0, 150_000, (rows,)), torch.full((rows,), position),
              tables, torch.full((rows,), CONTEXT, dtype=torch.int32), slots)
    return tuple(t.to(device) for t in inputs), next_block


def _side_by_side(runner, parts: list[tuple[torch.Tensor, ...]], streams: list) -> Callable[[int], None]:
    def call(_: int) -> None:
        main = torch.cuda.current_stream()
        fork, joins = torch.cuda.Event(), []
        fork.record(main)
        for part, stream in zip(parts[1:], streams):
            stream.wait_event(fork)
            with torch.cuda.stream(stream):
                runner.decode_fn(*part)
                joins.append(torch.cuda.Event())
                joins[-1].record(stream)
        runner.decode_fn(*parts[0])
        for join in joins:
            main.wait_event(join)
    return call


@torch.inference_mode()
def probe_streams(rows: list[int], ks: list[int]) -> dict[str, float]:
    from benchmarks.common import build_random_model, qwen2_config
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    model = build_random_model(qwen2_config(), torch.bfloat16, "cuda")
    engine = LLMEngine(model, dtype=torch.bfloat16, device="cuda", max_num_seqs=max(rows), max_model_len=1024)
    streams = [torch.cuda.Stream() for _ in range(max(ks) - 1)]
    report = {}
    for b in rows:
        for k in ks:
            parts, next_block = [], 1
            for _ in range(k):
                part, next_block = shared_prompt_inputs(b // k, next_block, "cuda")
                parts.append(part)
            report[f"{b} rows, {k} stream(s)"] = round(graph_us(_side_by_side(engine.runner, parts, streams), 1, 20), 1)
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", choices=("gemm", "streams"), required=True)
    parser.add_argument("--rows", default="256,512", help="comma list of decode batch sizes")
    parser.add_argument("--streams", default="1,2,4", help="streams probe: comma list of k")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("the probes time CUDA graphs: run them on a GPU")
    rows = [int(r) for r in args.rows.split(",")]
    result = probe_gemm(rows) if args.probe == "gemm" else \
        probe_streams(rows, [int(k) for k in args.streams.split(",")])
    report = {"benchmark": "decode_floor_probes", "probe": args.probe, "results": result,
              "environment": environment("cuda")}
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
