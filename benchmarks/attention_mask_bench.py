"""sdpa at training micro-batch shapes: with the padding mask transformers builds for left-padded rows, against
plain causal attention with no mask (what `use_remove_padding`'s aligned rows get, workers/padding.py).

    python benchmarks/attention_mask_bench.py [--quick] [--out results/attention_mask.json]

Per (rows, columns) shape, Qwen2.5-0.5B's heads (14 query, 2 key/value, dim 64), bf16 on CUDA: forward and
forward+backward µs per call (CUDA events, mean of --iters after 3 warm-ups), with the key/value heads
repeated as transformers does and with sdpa's `enable_gqa`. The mask is boolean (rows, 1, S, S): causal and
left padding (prompts 0..88 tokens shorter than S), pad query rows seeing every column as transformers
lets them. --quick: small shapes on CPU in fp32 (a smoke test; the timings mean nothing there).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common import emit, environment, sync  # noqa: E402

# update_actor micro-batches of the rl_step workload (49152-token budget): the longest rows, typical ones,
# and long responses
SHAPES = ((113, 415), (127, 370), (60, 800))
QUICK_SHAPES = ((4, 24), (3, 40))


def padding_mask(rows: int, columns: int, max_pad: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    """(rows, 1, S, S) bool: causal, left padding of 0..max_pad columns per row; pad query rows see all."""
    gen = torch.Generator().manual_seed(seed)
    left = torch.randint(0, max_pad + 1, (rows,), generator=gen).to(device)
    col = torch.arange(columns, device=device)
    valid = col[None] >= left[:, None]  # (rows, S): real tokens
    causal = col[None, :] <= col[:, None]  # (S, S)
    mask = causal[None] & valid[:, None, :]
    return (mask | ~valid[:, :, None])[:, None]


def time_us(fn: Callable[[], Any], device: torch.device, iters: int) -> float:
    for _ in range(3):
        fn()
    if device.type != "cuda":
        import time

        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) / iters * 1e6
    sync(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iters):
        fn()
    end.record()
    sync(device)
    return begin.elapsed_time(end) / iters * 1e3


def time_shape(rows: int, columns: int, device: torch.device, dtype: torch.dtype, iters: int) -> dict[str, Any]:
    heads, kv_heads, head_dim = 14, 2, 64
    q = torch.randn(rows, heads, columns, head_dim, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(rows, kv_heads, columns, head_dim, device=device, dtype=dtype, requires_grad=True)
            for _ in range(2))
    grad = torch.randn_like(q)
    mask = padding_mask(rows, columns, min(88, columns // 2), device)
    repeated = (k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1))
    variants = {"mask": dict(attn_mask=mask), "causal": dict(is_causal=True)}
    result: dict[str, Any] = {}
    for name, kwargs in variants.items():
        for gqa in (False, True):
            keys = (k, v) if gqa else repeated
            extra = dict(kwargs, enable_gqa=True) if gqa else kwargs

            def forward():
                return F.scaled_dot_product_attention(q, *keys, **extra)

            def forward_backward():
                forward().backward(grad, retain_graph=not gqa)  # the repeated k/v graph is reused

            result[name + ("_gqa" if gqa else "")] = {"fwd_us": round(time_us(forward, device, iters), 1),
                                                      "fwd_bwd_us": round(time_us(forward_backward, device, iters), 1)}
    result["causal_speedup_fwd"] = round(result["mask"]["fwd_us"] / result["causal"]["fwd_us"], 2)
    result["causal_speedup_fwd_bwd"] = round(result["mask"]["fwd_bwd_us"] / result["causal"]["fwd_bwd_us"], 2)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes on CPU (smoke test)")
    parser.add_argument("--iters", type=int, default=None, help="timed calls per variant, default 20 (quick: 1)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.quick else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    iters = args.iters or (1 if args.quick else 20)
    torch.manual_seed(0)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    result = {"benchmark": "attention_mask_bench", "dtype": str(dtype), "iters": iters,
              "shapes": {f"{rows}x{columns}": time_shape(rows, columns, device, dtype, iters)
                         for rows, columns in shapes},
              "environment": environment(str(device))}
    emit(result, args.out)
    return result


if __name__ == "__main__":
    main()
