"""The update's forward+backward per micro-batch in the two precision paths the actor takes: one process
(fp32 master weights under bf16 autocast) and a rank (FSDP2 with param_dtype bf16, here over a 1-rank group,
so no collective runs); plus plain bf16 weights for reference. Does a rank's path cost more on its own?

    python benchmarks/update_path_bench.py --out update_path.json   # CUDA: Qwen2.5-0.5B, 123 rows x 429 tokens
    python benchmarks/update_path_bench.py --quick                  # toy model on CPU (gloo; smoke run)

The model is built as the actor builds it (activation checkpointing, regional torch.compile on CUDA) and the
micro-batch has rl_step_bench's shape (left-padded GSM8K-length prompts + 256 response tokens). Per path:
wall time per forward+backward (mean of `--iters` after 3 warm-ups) and, on CUDA, the device time of one
profiled iteration; wall minus device is time the device waited on the host (FSDP hooks, compiled-region
entry), the part a rank adds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.autograd import DeviceType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import (build_random_model, emit, environment, fill_defaults, qwen2_config, sync,  # noqa: E402
                               timed)
from hybridrl.distributed.fsdp import apply_fsdp2  # noqa: E402
from hybridrl.distributed.local_launcher import find_free_port  # noqa: E402
from hybridrl.models.compile import compile_decoder_layers  # noqa: E402
from hybridrl.models.hf import enable_activation_checkpointing  # noqa: E402

MODES = ("autocast", "fsdp", "bf16")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy model on CPU")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma list out of {MODES}")
    parser.add_argument("--rows", type=int, default=None, help="rows per micro-batch (default 123; quick 4)")
    parser.add_argument("--prompt-length", type=int, default=None, help="longest prompt (default 173; quick 12)")
    parser.add_argument("--response-length", type=int, default=None, help="default 256 (quick 8)")
    parser.add_argument("--iters", type=int, default=None, help="timed iterations (default 8; quick 2)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    fill_defaults(args, dict(rows=4, prompt_length=12, response_length=8, iters=2),
                  dict(rows=123, prompt_length=173, response_length=256, iters=8))
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        parser.error(f"unknown mode(s) {sorted(unknown)}; choose from {MODES}")
    return args


def micro_batch(rows: int, prompt: int, response: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Left-padded prompts of prompt/2..prompt tokens (the first row the longest) + full responses."""
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(prompt // 2, prompt + 1, (rows,), generator=gen)
    lengths[0] = prompt
    ids = torch.randint(0, 1000, (rows, prompt + response), generator=gen)
    mask = torch.ones(rows, prompt + response, dtype=torch.long)
    for row, length in enumerate(lengths.tolist()):
        mask[row, :prompt - length] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "position_ids": positions.to(device)}


def build(mode: str, quick: bool, device: torch.device) -> torch.nn.Module:
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    model = build_random_model(qwen2_config(quick), dtype, str(device)).train().requires_grad_(True)
    enable_activation_checkpointing(model)
    compile_decoder_layers(model, device, "actor", enabled=True, off_key="(benchmark)")
    if mode == "fsdp":
        compute = torch.bfloat16 if device.type == "cuda" else None
        apply_fsdp2(model.model, param_dtype=compute, reduce_dtype=torch.float32)  # the body: no LM head here
    return model


def forward_backward(model: torch.nn.Module, mode: str, batch: dict[str, torch.Tensor]) -> None:
    device_type = batch["input_ids"].device.type
    autocast = torch.autocast(device_type, dtype=torch.bfloat16, enabled=mode == "autocast" and device_type == "cuda")
    with autocast:
        hidden = model.model(**batch).last_hidden_state
    hidden.float().square().mean().backward()


def device_ms(model, mode: str, batch, device: torch.device) -> float | None:
    """Device time of one forward+backward (sum of kernel self times), CUDA only."""
    if device.type != "cuda":
        return None
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        forward_backward(model, mode, batch)
        sync(device)
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
    return sum(e.self_device_time_total for e in kernels) / 1e3  # what the profiler's "Self CUDA time total" sums


def measure(mode: str, args, device: torch.device, batch) -> dict[str, Any]:
    model = build(mode, args.quick, device)
    for _ in range(3):
        forward_backward(model, mode, batch)
    seconds: dict[str, float] = {}
    with timed(device, seconds, "iters"):
        for _ in range(args.iters):
            forward_backward(model, mode, batch)
    wall = seconds["iters"] * 1e3 / args.iters
    result = {"wall_ms": round(wall, 2)}
    busy = device_ms(model, mode, batch, device)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the next path starts from the same free memory
    if busy is not None:
        result.update(device_ms=round(busy, 2), device_waits_ms=round(wall - busy, 2))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    device = torch.device("cpu" if args.quick or not torch.cuda.is_available() else "cuda")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1,
                            init_method=f"tcp://127.0.0.1:{find_free_port()}")
    try:
        batch = micro_batch(args.rows, args.prompt_length, args.response_length, device)
        paths = {mode: measure(mode, args, device, batch) for mode in args.modes}
    finally:
        dist.destroy_process_group()
    result = {"environment": environment(str(device)), "micro_batch": {
        "rows": args.rows, "tokens_per_row": args.prompt_length + args.response_length}, "paths": paths}
    emit(result, args.out)
    return result


if __name__ == "__main__":
    main()
