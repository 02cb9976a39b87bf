"""The batch-invariant GEMM's tile and TMA configurations against cuBLAS at the Qwen2.5-0.5B and 7B shapes (a decode
step's 512 rows, a micro-batch's 8192), each configuration's bits against hybridrl's kernel; and the engine's fused
RoPE and SiLU-and-mul kernels against the torch code, bit for bit. One GPU; prints and writes JSON.

    python benchmarks/invariant_gemm_bench.py --out "$OUT/invariant_gemm_probe_h200.json"

A configuration is (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages, persistent). benchmarks/README.md
("mismatch_bench.py") has the results and what hybridrl/models/invariant/matmul.py took from them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

CONFIGS = [(64, 64, 64, 8, 4, 4, False), (64, 128, 64, 8, 4, 4, False), (128, 128, 64, 8, 8, 4, False),
           (128, 256, 64, 8, 8, 3, False), (128, 128, 64, 8, 8, 4, True), (128, 256, 64, 8, 8, 3, True),
           (64, 128, 64, 8, 4, 4, True), (64, 64, 128, 8, 4, 3, False), (128, 128, 128, 8, 8, 3, False)]
# name -> (K, N): the 0.5B and 7B shapes' projections (q/k/v and gate/up fused, as the engine runs them)
SHAPES = {"qkv": (896, 1152), "o": (896, 896), "gate_up": (896, 9728), "down": (4864, 896), "lm_head": (896, 151936),
          "7b_qkv": (3584, 4608), "7b_gate_up": (3584, 37888), "7b_down": (18944, 3584), "7b_lm_head": (3584, 152064)}


def tma_linear(x: torch.Tensor, w: torch.Tensor, config: tuple) -> torch.Tensor:
    """x @ w.T by hybridrl's TMA kernel (matmul.py) in `config`; not persistent: one program per output tile."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from hybridrl.models.invariant.matmul import _tma_linear_kernel

    bm, bn, bk, group_m, num_warps, num_stages, persistent = config
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    tiles = triton.cdiv(x.shape[0], bm) * triton.cdiv(w.shape[0], bn)
    programs = min(sms, tiles) if persistent else tiles
    _tma_linear_kernel[(programs,)](
        TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
        TensorDescriptor.from_tensor(out, [bm, bn]), w, x.shape[0], w.shape[0], x.shape[1], HAS_BIAS=False,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m, NUM_PROGRAMS=programs, num_warps=num_warps,
        num_stages=num_stages)
    return out


def microseconds(fn, reps: int = 50) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1e3


def gemm_rows(rows: int) -> dict[str, Any]:
    from hybridrl.models.invariant.matmul import linear_forward

    out = {}
    for name, (k, n) in SHAPES.items():
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 30
        ours = linear_forward(x, w)
        row = {"cublas_us": microseconds(lambda: F.linear(x, w)), "hybridrl_us": microseconds(lambda: linear_forward(x, w)),
               "cublas_same_bits": bool(torch.equal(F.linear(x, w), ours))}
        for config in CONFIGS:
            row[str(config)] = {"us": microseconds(lambda: tma_linear(x, w, config)),
                                "same_bits": bool(torch.equal(tma_linear(x, w, config), ours))}
        out[f"{rows}_{name}"] = row
        print(rows, name, json.dumps(row), flush=True)
    return out


def fused_elementwise_bits() -> dict[str, Any]:
    """The engine's fused RoPE (with the KV store) and SiLU-and-mul against the torch code they replace."""
    from hybridrl.models.rope import RotaryEmbedding
    from hybridrl.rollout.engine import fused_ops

    with torch.device("cuda"):
        rope = RotaryEmbedding(1.0 / 1e6 ** (torch.arange(0, 64, 2, dtype=torch.int64).float() / 64), 1.0, 4096)
    tokens, q_heads, kv_heads, dim = 512, 14, 2, 64
    q = torch.randn(tokens, q_heads, dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(tokens, kv_heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    positions = torch.randint(0, 4000, (tokens,), device="cuda")
    q_torch, k_torch = rope(positions, q.clone(), k.clone())
    k_cache, v_cache = (torch.zeros(tokens, 1, kv_heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    q_fused = fused_ops.rotary_store_kv(q.clone(), k.clone(), v.clone(), positions, rope.cos, rope.sin, 64, k_cache,
                                        v_cache, torch.arange(tokens, device="cuda"))
    gate_up = torch.randn(tokens, 2 * 4864, device="cuda", dtype=torch.bfloat16) * 3
    gate, up = gate_up.chunk(2, -1)
    silu_fused = fused_ops.silu_and_mul(gate_up)
    return {"rope_q_same_bits": bool(torch.equal(q_fused, q_torch)), "rope_k_same_bits": bool(torch.equal(k_cache[:, 0], k_torch)),
            "rope_q_elements_differing": (q_fused != q_torch).float().mean().item(),
            "silu_and_mul_same_bits": bool(torch.equal(silu_fused, F.silu(gate) * up))}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (Hopper or later for the TMA configurations)")
    torch.manual_seed(0)
    result = {"elementwise": fused_elementwise_bits(), "gemm": gemm_rows(512) | gemm_rows(8192)}
    print(json.dumps(result["elementwise"]))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
