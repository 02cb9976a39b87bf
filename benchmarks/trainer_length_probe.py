"""Does the trainer's cost per token grow with row length? A fixed token count cut into short or long rows;
prints one JSON object.

    python benchmarks/trainer_length_probe.py --out length_probe.json   # H200: Qwen2.5-0.5B shape, 16384 tokens
    python benchmarks/trainer_length_probe.py --quick                   # toy shape on CPU (checks the script)

On one H200 the body's cost per token barely grows from rows of 256 to rows of 2048 (benchmarks/README.md,
async_bench.py section). Per row length L (rows = tokens // L, positions 0..L-1, no mask, as
the trainer's aligned rows):
- `body_forward_s`, `body_forward_backward_s`: the HF decoder body (no LM head) without grad, and with grad and
  gradient checkpointing as the trainer runs it; `*_us_per_token` the same per token;
- `sdpa_s`: one layer's causal GQA attention (`enable_gqa`, as transformers calls it without a mask), forward,
  with PyTorch's choice of kernel and with each backend forced (`sdpa_forced_s`: seconds, or why the backend
  refused). If the long rows cost more per token and the default choice is as slow as the math backend, the
  attention kernel is the cause.
Every timed call repeats its warm-up's shape, so a cost paid once per new shape (cuDNN attention's graph build)
does not show here; `trace_gaps.py` on a profiled step of changing shapes finds it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import build_random_model, emit, environment, fill_defaults, qwen2_config, timed  # noqa: E402

BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy Qwen2 shape and sizes (CPU, seconds)")
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--tokens", type=int, default=None, help="tokens per forward, default 16384 (quick: 256)")
    parser.add_argument("--lengths", default=None, help="row lengths, default 256,512,1024,2048 (quick: 32,128)")
    parser.add_argument("--reps", type=int, default=None, help="timed calls after one warm-up, default 5 (quick: 1)")
    args = parser.parse_args(argv)
    args.device = args.device or ("cpu" if args.quick or not torch.cuda.is_available() else "cuda")
    fill_defaults(args, dict(tokens=256, lengths="32,128", reps=1), dict(tokens=16384, lengths="256,512,1024,2048", reps=5))
    args.lengths = [int(length) for length in args.lengths.split(",") if length]
    if any(length < 1 or length > args.tokens for length in args.lengths):
        parser.error(f"--lengths {args.lengths}: each must be between 1 and --tokens ({args.tokens})")
    args.dtype = torch.bfloat16 if torch.device(args.device).type == "cuda" else torch.float32
    return args


def seconds_per_call(call: Callable[[], Any], device: str, reps: int) -> float:
    call()  # warm-up: the same size as the timed calls
    elapsed: dict[str, float] = {}
    with timed(device, elapsed, "calls"):
        for _ in range(reps):
            call()
    return elapsed["calls"] / reps


def body_timings(model, length: int, args) -> dict[str, float]:
    rows = args.tokens // length
    ids = torch.randint(0, model.config.vocab_size, (rows, length), device=args.device)
    positions = torch.arange(length, device=args.device).expand(rows, -1)

    def forward():
        with torch.no_grad():
            model.model(input_ids=ids, position_ids=positions, use_cache=False)

    def forward_backward():
        hidden = model.model(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state
        hidden.float().square().mean().backward()
        model.zero_grad(set_to_none=True)

    tokens = rows * length
    out = {"rows": rows, "body_forward_s": seconds_per_call(forward, args.device, args.reps),
           "body_forward_backward_s": seconds_per_call(forward_backward, args.device, args.reps)}
    out["body_forward_us_per_token"] = out["body_forward_s"] / tokens * 1e6
    out["body_forward_backward_us_per_token"] = out["body_forward_backward_s"] / tokens * 1e6
    return out


def sdpa_timings(config, length: int, args) -> dict[str, Any]:
    rows, head_dim = args.tokens // length, config.hidden_size // config.num_attention_heads
    q = torch.randn(rows, config.num_attention_heads, length, head_dim, device=args.device, dtype=args.dtype)
    kv = torch.randn(rows, config.num_key_value_heads, length, head_dim, device=args.device, dtype=args.dtype)

    def attention():
        F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)

    forced: dict[str, float | str] = {}
    for name in BACKENDS:
        try:
            with torch.nn.attention.sdpa_kernel(getattr(torch.nn.attention.SDPBackend, name)):
                forced[name] = seconds_per_call(attention, args.device, args.reps)
        except RuntimeError as err:  # the backend does not take these inputs here: say why
            forced[name] = (str(err).strip().splitlines() or ["refused"])[0][:200]
    return {"sdpa_s": seconds_per_call(attention, args.device, args.reps), "sdpa_forced_s": forced}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    config = qwen2_config(quick=args.quick)
    model = build_random_model(config, args.dtype, args.device).train().requires_grad_(True)
    model.gradient_checkpointing_enable()
    result: dict[str, Any] = {
        "workload": {"tokens": args.tokens, "lengths": args.lengths, "reps": args.reps, "dtype": str(args.dtype),
                     "hidden_size": config.hidden_size, "num_hidden_layers": config.num_hidden_layers,
                     "heads": [config.num_attention_heads, config.num_key_value_heads], "gradient_checkpointing": True},
        "environment": environment(args.device), "lengths": {}}
    for length in args.lengths:
        result["lengths"][str(length)] = body_timings(model, length, args) | sdpa_timings(config, length, args)
    emit(result, args.out)
    return result


if __name__ == "__main__":
    main()
