"""Rollout throughput: hybridrl's LLMEngine vs HF `generate` on a Qwen2.5-0.5B-shaped model; prints one JSON object.

    python benchmarks/rollout_bench.py --out rollout.json     # H200: 64 GSM8K prompts x n=8 x 256 tokens
    python benchmarks/rollout_bench.py --quick --device cpu   # toy shapes, CPU smoke test

Peers, all in the same process and run: HF `generate` with its default dynamic cache, and HF's fastest path
(`cache_implementation="static"` with its automatic torch.compile of the decode step on CUDA). Every peer, the
engine included, is warmed the same way: one full-size call of the timed workload, then the timed call; ratios are
taken only between numbers of one run. See benchmarks/README.md for the sections of the output.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import (GSM8K_64, H200_BANDWIDTH, environment, emit, fill_defaults, gsm8k_prompts,  # noqa: E402
                               build_random_model, kv_bytes_per_token, model_bytes, peak_memory_gb,
                               qwen2_config, reset_peak_memory, timed)
from hybridrl.rollout.base import SamplingParams  # noqa: E402
from hybridrl.rollout.engine.llm_engine import DEFAULT_DECODE_BURST  # noqa: E402

ROOFLINE_FORMULA = ("decode step roofline_s = (weight_bytes + kv_bytes_per_token * sum over sequences of "
                    "(prompt_len + response_len / 2)) / 4.3e12 B/s; fraction = roofline_s / mean_decode_step_s")

WARMUP = ("every peer, the engine included: one full-size call of the timed workload (same prompts, n and "
          "lengths), then the timed call; the engine's prefix cache is emptied in between")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy model and sizes (CPU, < 60 s)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--skip-hf", action="store_true", help="skip the HF generate baselines")
    parser.add_argument("--skip-hf-static", action="store_true",
                        help="skip HF's static-cache (+ torch.compile on CUDA) peer")
    parser.add_argument("--skip-extras", action="store_true", help="only the main engine-vs-HF comparison")
    parser.add_argument("--gsm8k", default=str(GSM8K_64), help="jsonl with GSM8K 'question' rows")
    parser.add_argument("--num-prompts", type=int, default=None, help="default 64 (quick: 4)")
    parser.add_argument("--n", type=int, default=None, help="samples per prompt, default 8 (quick: 2)")
    parser.add_argument("--response-length", type=int, default=None, help="forced tokens, default 256 (quick: 8)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--enforce-eager", action="store_true", help="engine without CUDA graphs")
    parser.add_argument("--max-decode-burst", type=int, default=DEFAULT_DECODE_BURST,
                        help="decode steps per host round trip (1 = sync every step)")
    parser.add_argument("--profile", default=None,
                        help="write a torch.profiler table (top kernels) of one engine generate here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    fill_defaults(args, dict(num_prompts=4, n=2, response_length=8), dict(num_prompts=64, n=8, response_length=256))
    # Varying-length section: responses capped at max_len, mean ~max_len * 0.4 (see stop_ids).
    args.varied_max_len = 16 if args.quick else 512
    args.dtype = torch.float32 if args.quick and args.device == "cpu" else torch.bfloat16
    return args


def make_engine(model: torch.nn.Module, args: argparse.Namespace, max_num_seqs: int, max_model_len: int,
                enable_prefix_caching: bool = True, max_decode_burst: int | None = None):
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    return LLMEngine(model, dtype=args.dtype, device=args.device, max_num_seqs=max_num_seqs,
                     max_model_len=max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
                     enable_prefix_caching=enable_prefix_caching, enforce_eager=args.enforce_eager,
                     seed=args.seed, max_decode_burst=max_decode_burst or args.max_decode_burst)


def release_memory() -> None:
    """Return freed engines' memory to the device (call after dropping the last reference)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_engine(engine, prompts: list[list[int]], params: SamplingParams, device: str) -> dict[str, Any]:
    """One timed `generate` on an empty prefix cache, after a full-size warm-up call (WARMUP): it captures the decode
    CUDA graphs of every batch size the workload passes through, as the timed call needs them."""
    times: dict[str, float] = {}
    with timed(device, times, "warmup_wall_s"):
        engine.generate(prompts, params)
    engine.sleep()  # sleep + wake_up empties the prefix cache (the decode graphs stay): the warm-up must not hit
    engine.wake_up()
    reset_peak_memory(device)
    with timed(device, times, "wall_s"):
        out = engine.generate(prompts, params)
    lengths = [len(t) for t in out.token_ids]
    return {
        "wall_s": times["wall_s"],
        "warmup_wall_s": times["warmup_wall_s"],
        "generated_tokens": sum(lengths),
        "gen_tok_s": sum(lengths) / times["wall_s"],
        "num_sequences": len(lengths),
        "response_length": length_stats(lengths),
        "peak_memory_gb": peak_memory_gb(device),
        "kv_cache_gb": engine.kv_cache_bytes / 2**30,
        "graph_capture_s": getattr(getattr(engine.runner, "graph_runner", None), "capture_time_s", None),
        "metrics": out.metrics,
    }


def length_stats(lengths: list[int]) -> dict[str, float]:
    ordered = sorted(lengths)
    return {"min": ordered[0], "p50": ordered[len(ordered) // 2], "mean": statistics.fmean(ordered),
            "max": ordered[-1]}


def hf_static_kwargs(device: str) -> dict[str, Any]:
    """HF's fastest `generate`: a static KV cache, whose decode forward transformers compiles with torch.compile
    (mode reduce-overhead: CUDA graphs) on CUDA; on CPU the static cache runs eagerly."""
    from transformers import CompileConfig

    return {"cache_implementation": "static",
            **({"compile_config": CompileConfig(mode="reduce-overhead")} if device.startswith("cuda") else {})}


def run_hf(model, prompts: list[list[int]], n: int, max_new_tokens: int, device: str, pad_id: int,
           stop_ids: list[int] | None = None, static: bool = False) -> dict[str, Any]:
    """HF `generate` (sdpa, sampling at temperature 1): the n samples as repeated, left-padded rows, timed after a
    full-size warm-up call (WARMUP). `static`: HF's static cache and, on CUDA, its compiled decode step.

    Without `stop_ids` every row is forced to `max_new_tokens` (min_new_tokens = max_new_tokens).
    """
    rows = [p for p in prompts for _ in range(n)]
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, row in enumerate(rows):
        input_ids[i, width - len(row):] = torch.tensor(row)
        attention_mask[i, width - len(row):] = 1
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                  pad_token_id=pad_id)
    kwargs.update(dict(eos_token_id=stop_ids) if stop_ids else dict(min_new_tokens=max_new_tokens))
    if static:
        kwargs.update(hf_static_kwargs(device))
    inputs = dict(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device))
    times: dict[str, float] = {}
    with torch.inference_mode(), timed(device, times, "warmup_wall_s"):
        model.generate(**inputs, **kwargs)
    reset_peak_memory(device)
    with torch.inference_mode(), timed(device, times, "wall_s"):
        out = model.generate(**inputs, **kwargs)
    generated = out[:, width:].cpu()
    lengths = hf_lengths(generated, stop_ids) if stop_ids else [generated.shape[1]] * len(rows)
    return {"wall_s": times["wall_s"], "warmup_wall_s": times["warmup_wall_s"], "generated_tokens": sum(lengths),
            "cache": "static" if static else "dynamic", "compiled": static and device.startswith("cuda"),
            "gen_tok_s": sum(lengths) / times["wall_s"], "response_length": length_stats(lengths),
            "peak_memory_gb": peak_memory_gb(device)}


def hf_lengths(generated: torch.Tensor, stop_ids: list[int]) -> list[int]:
    """Tokens up to and including the first stop id of each row (the rest is padding)."""
    hit = torch.isin(generated, torch.tensor(stop_ids))
    first = torch.where(hit.any(1), hit.int().argmax(1) + 1, torch.full_like(hit[:, 0], generated.shape[1],
                                                                            dtype=torch.long))
    return first.tolist()


def roofline(model, config, prompts: list[list[int]], n: int, response_length: int, dtype: torch.dtype,
             mean_step_s: float | None) -> dict[str, Any]:
    """Bandwidth roofline of the mean decode step of the forced-length run (see ROOFLINE_FORMULA)."""
    weight_bytes = model_bytes(model)  # built in `dtype`
    ctx_sum = n * sum(len(p) + response_length / 2 for p in prompts)
    kv_read = kv_bytes_per_token(config, dtype) * ctx_sum
    step_s = (weight_bytes + kv_read) / H200_BANDWIDTH
    return {"formula": ROOFLINE_FORMULA, "weight_bytes": weight_bytes, "kv_bytes_read_per_step": kv_read,
            "roofline_step_s": step_s, "roofline_gen_tok_s": n * len(prompts) / step_s,
            "fraction_of_roofline": step_s / mean_step_s if mean_step_s else None}


def stop_ids_for_mean_length(vocab_size: int, mean_tokens: int, seed: int) -> list[int]:
    """Random 'EOS' ids: with near-uniform random-weight logits each sampled token stops its sequence with
    probability ~len(ids)/V, i.e. geometric response lengths of mean ~mean_tokens (before the cap)."""
    gen = torch.Generator().manual_seed(seed)
    count = max(1, round(vocab_size / mean_tokens))
    return torch.randperm(vocab_size, generator=gen)[:count].tolist()


def main_comparison(model, config, prompts, args) -> dict[str, Any]:
    """Engine vs HF on the forced-length workload (prompts x n x response_length)."""
    max_len = max(map(len, prompts)) + args.varied_max_len
    params = SamplingParams(n=args.n, max_new_tokens=args.response_length, ignore_eos=True, temperature=1.0,
                            seed=args.seed)
    result: dict[str, Any] = {"warmup": WARMUP}
    if not args.skip_hf:
        result["hf"] = run_hf(model, prompts, args.n, args.response_length, args.device, config.pad_token_id)
        if not args.skip_hf_static:
            try:
                result["hf_static"] = run_hf(model, prompts, args.n, args.response_length, args.device,
                                             config.pad_token_id, static=True)
            except Exception as exc:  # a peer that fails to compile is reported, not fatal (the others still run)
                result["hf_static_error"] = repr(exc)[:500]
    engine = make_engine(model, args, max_num_seqs=len(prompts) * args.n, max_model_len=max_len)
    result["engine"] = run_engine(engine, prompts, params, args.device)
    for peer in ("hf", "hf_static"):  # ratios only between numbers of this run
        if peer in result:
            result[f"engine_over_{peer}"] = result["engine"]["gen_tok_s"] / result[peer]["gen_tok_s"]
    step_s = result["engine"]["metrics"].get("rollout/mean_decode_step_s")
    result["roofline"] = roofline(model, config, prompts, args.n, args.response_length, args.dtype, step_s)
    return {"result": result, "engine": engine}


def varied_lengths(model, config, prompts, args, engine) -> dict[str, Any]:
    """(a) EOS allowed: random stop ids give geometric lengths capped at varied_max_len (emulation)."""
    stop_ids = stop_ids_for_mean_length(config.vocab_size, int(args.varied_max_len * 0.4), args.seed)
    params = SamplingParams(n=args.n, max_new_tokens=args.varied_max_len, eos_token_ids=tuple(stop_ids),
                            temperature=1.0, seed=args.seed)
    result = {"emulation": f"{len(stop_ids)} random stop ids of {config.vocab_size} (p(stop) ~ "
                           f"{len(stop_ids) / config.vocab_size:.4f} per token), max_new_tokens "
                           f"{args.varied_max_len}; the engine has one SamplingParams per call, so no "
                           "per-request max length",
              "engine": run_engine(engine, prompts, params, args.device)}
    if not args.skip_hf:
        result["hf"] = run_hf(model, prompts, args.n, args.varied_max_len, args.device, config.pad_token_id,
                              stop_ids)
        result["engine_over_hf"] = result["engine"]["gen_tok_s"] / result["hf"]["gen_tok_s"]
    return result


def prefix_caching(model, prompts, args, main_engine_result: dict[str, Any]) -> dict[str, Any]:
    """(b) n=1 vs n=n with prefix caching on/off, forced lengths; n, on is the main run."""
    max_len = max(map(len, prompts)) + args.varied_max_len
    keep = ("gen_tok_s", "wall_s", "generated_tokens", "peak_memory_gb")
    rows = {f"n{args.n}_prefix_on": main_engine_result}
    for n, prefix in ((1, True), (1, False), (args.n, False)):
        engine = make_engine(model, args, max_num_seqs=len(prompts) * n, max_model_len=max_len,
                             enable_prefix_caching=prefix)
        params = SamplingParams(n=n, max_new_tokens=args.response_length, ignore_eos=True, seed=args.seed)
        rows[f"n{n}_prefix_{'on' if prefix else 'off'}"] = run_engine(engine, prompts, params, args.device)
        engine.sleep()
        del engine
        release_memory()
    return {name: {**{k: r[k] for k in keep}, **{k: v for k, v in r["metrics"].items()
                                                if "prefill" in k or "decode_step" in k or "prefix" in k}}
            for name, r in rows.items()}


KERNEL_LAYERS = 8  # distinct caches per timed call, so K/V come from HBM rather than the 60 MB L2


def paged_case(batch: int, ctx: int, config, dtype: torch.dtype, page: int = 16):
    """Random paged caches for KERNEL_LAYERS layers, shuffled physical blocks, every sequence at `ctx` tokens."""
    head_dim = config.hidden_size // config.num_attention_heads
    per_seq = -(-ctx // page)
    num_blocks = batch * per_seq
    shape = (KERNEL_LAYERS, num_blocks, page, config.num_key_value_heads, head_dim)
    k_cache = torch.randn(shape, device="cuda", dtype=dtype)
    v_cache = torch.randn(shape, device="cuda", dtype=dtype)
    tables = torch.randperm(num_blocks, device="cuda").view(batch, per_seq).int()
    lens = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
    q = torch.randn(batch, config.num_attention_heads, head_dim, device="cuda", dtype=dtype)
    return q, k_cache, v_cache, tables, lens


def per_layer_us(fn) -> float:
    """Microseconds per layer of `fn` (which runs KERNEL_LAYERS layers), replayed as a CUDA graph like
    the engine's decode step, so Python launch overhead is not in the number."""
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn) * 1e3 / KERNEL_LAYERS


def time_attention(config, batch: int, ctx: int, dtype: torch.dtype, **knobs: int) -> dict[str, Any]:
    """Triton paged decode (one layer) vs SDPA (enable_gqa) on a contiguous cache of the same size."""
    from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention

    q, k_cache, v_cache, tables, lens = paged_case(batch, ctx, config, dtype)
    scale = q.shape[-1] ** -0.5
    us = per_layer_us(lambda: [paged_decode_attention(q, k_cache[i], v_cache[i], tables, lens, scale, **knobs)
                               for i in range(KERNEL_LAYERS)])
    kv_bytes = 2 * k_cache[0, 0, 0].numel() * k_cache.element_size() * batch * ctx  # K and V, one layer
    row = {"batch": batch, "context": ctx, "triton_us": us, "kv_bytes": kv_bytes,
           "triton_tb_s": kv_bytes / us / 1e6, "fraction_of_4_3_tb_s": kv_bytes / (us * 1e-6) / H200_BANDWIDTH}
    if knobs:
        return row
    del k_cache, v_cache
    shape = (KERNEL_LAYERS, batch, config.num_key_value_heads, ctx, q.shape[-1])
    k, v = torch.randn(shape, device="cuda", dtype=dtype), torch.randn(shape, device="cuda", dtype=dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        sdpa_us = per_layer_us(lambda: [sdpa(q[:, :, None], k[i], v[i], scale=scale, enable_gqa=True)
                                        for i in range(KERNEL_LAYERS)])
    except Exception as exc:  # a peer that cannot be captured is reported, not fatal
        return {**row, "sdpa_error": repr(exc)[:200]}
    return {**row, "sdpa_contiguous_us": sdpa_us, "triton_over_sdpa_speed": sdpa_us / us}


def sweep_knobs(config, batch: int, ctx: int, dtype: torch.dtype) -> list[dict[str, Any]]:
    """block_n x num_warps x num_stages of the decode kernel at one shape, then a few split-K settings, fastest
    first."""
    rows = []
    for block_n in (32, 64, 128):
        for num_warps in (2, 4, 8):
            for num_stages in (1, 2, 3):
                knobs = dict(block_n=block_n, num_warps=num_warps, num_stages=num_stages)
                try:
                    rows.append({**knobs, "us": time_attention(config, batch, ctx, dtype, **knobs)["triton_us"]})
                except Exception as exc:  # a config the compiler rejects (e.g. shared memory) is data too
                    rows.append({**knobs, "error": repr(exc)[:200]})
    for block_n in (32, 64):  # flash-decoding split-K at the main shape (the heuristic leaves it off there)
        for num_warps in (2, 4):
            for num_splits in (2, 4):
                knobs = dict(block_n=block_n, num_warps=num_warps, num_stages=2, num_splits=num_splits)
                rows.append({**knobs, "us": time_attention(config, batch, ctx, dtype, **knobs)["triton_us"]})
    return sorted(rows, key=lambda r: r.get("us", float("inf")))


def kernel_bench(config, prompts: list[list[int]], args: argparse.Namespace) -> dict[str, Any]:
    """Decode attention alone: the main shape, a mid and a small-batch long-context (split-K) shape, a sweep."""
    main_ctx = round(statistics.fmean(map(len, prompts)) + args.response_length / 2)
    batch = len(prompts) * args.n
    shapes = {"main": (batch, main_ctx), "mid_batch_2k": (64, 2048), "small_batch_8k": (4, 8192)}
    result: dict[str, Any] = {name: time_attention(config, b, c, args.dtype) for name, (b, c) in shapes.items()}
    result["sweep_main"] = sweep_knobs(config, batch, main_ctx, args.dtype)
    return result


def burst_comparison(model, prompts, args, main_engine_result: dict[str, Any]) -> dict[str, Any]:
    """The main workload with one host round trip per decode step (max_decode_burst=1) vs the main run."""
    max_len = max(map(len, prompts)) + args.varied_max_len
    params = SamplingParams(n=args.n, max_new_tokens=args.response_length, ignore_eos=True, temperature=1.0,
                            seed=args.seed)
    engine = make_engine(model, args, len(prompts) * args.n, max_len, max_decode_burst=1)
    single = run_engine(engine, prompts, params, args.device)
    engine.sleep()
    del engine
    release_memory()
    keep = ("gen_tok_s", "wall_s", "metrics")
    return {"burst_1": {k: single[k] for k in keep},
            f"burst_{args.max_decode_burst}": {k: main_engine_result[k] for k in keep},
            "speedup": main_engine_result["gen_tok_s"] / single["gen_tok_s"]}


def python_profile(engine, prompts, params) -> str:
    """cProfile of one `generate` on an empty prefix cache: where the host's time goes."""
    import cProfile
    import io
    import pstats

    engine.sleep()
    engine.wake_up()
    profiler = cProfile.Profile()
    profiler.runcall(engine.generate, prompts, params)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(35)
    return out.getvalue()


def profile_generate(engine, prompts, args) -> dict[str, Any]:
    """torch.profiler over one warm `generate` of the main workload, and over its prefill alone
    (max_new_tokens=1): the top ops by device time (and, for prefill, host time) to `args.profile`."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    device_key = "cuda_time_total" if ProfilerActivity.CUDA in activities else "cpu_time_total"
    summary: dict[str, Any] = {"file": args.profile}
    with open(args.profile, "w") as f:
        for name, new_tokens in (("generate", args.response_length), ("prefill_only", 1)):
            params = SamplingParams(n=args.n, max_new_tokens=new_tokens, ignore_eos=True, temperature=1.0,
                                    seed=args.seed + 1)
            engine.sleep()  # empty prefix cache, as in the timed run
            engine.wake_up()
            start = time.perf_counter()
            with profile(activities=activities) as prof:
                engine.generate(prompts, params)
            summary[f"{name}_wall_s"] = time.perf_counter() - start
            f.write(f"== {name}: host Python (cProfile of a second run, top by cumulative time)\n"
                    f"{python_profile(engine, prompts, params)}\n")
            averages = prof.key_averages()
            for sort_key in dict.fromkeys((device_key, "cpu_time_total")):
                f.write(f"== {name}, sorted by {sort_key}\n{averages.table(sort_by=sort_key, row_limit=30)}\n")
            events = sorted(averages, key=lambda e: getattr(e, "device_time_total", 0.0), reverse=True)
            summary[f"{name}_top_device_ms"] = {e.key[:80]: getattr(e, "device_time_total", 0.0) / 1e3
                                                for e in events[:12]}
    return summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    config = qwen2_config(quick=args.quick)
    model = build_random_model(config, args.dtype, args.device, seed=args.seed)
    prompts = gsm8k_prompts(config.vocab_size, args.num_prompts, args.gsm8k)
    report: dict[str, Any] = {
        "benchmark": "rollout", "quick": args.quick, "environment": environment(args.device),
        "workload": {"model": "Qwen2.5-0.5B shape, random weights" if not args.quick else "toy Qwen2",
                     "dtype": str(args.dtype), "num_prompts": len(prompts), "n": args.n,
                     "response_length": args.response_length, "prompt_length": length_stats(list(map(len, prompts))),
                     "tokenizer": "stand-in: 4 characters per token, crc32 mod vocab (benchmarks/common.py)"},
    }
    main_run = main_comparison(model, config, prompts, args)
    report["main"] = main_run["result"]
    if not args.skip_extras:
        report["varied_lengths"] = varied_lengths(model, config, prompts, args, main_run["engine"])
    if args.profile:
        report["profile"] = profile_generate(main_run["engine"], prompts, args)
    main_run.pop("engine").sleep()  # the last reference: the engine is freed here
    release_memory()
    if not args.skip_extras and args.max_decode_burst > 1:
        report["decode_burst"] = burst_comparison(model, prompts, args, report["main"]["engine"])
    if not args.skip_extras:
        report["prefix_caching"] = prefix_caching(model, prompts, args, report["main"]["engine"])
        if torch.device(args.device).type == "cuda":
            report["decode_attention_kernel"] = kernel_bench(config, prompts, args)
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
