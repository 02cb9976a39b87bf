"""Rollout backends behind one interface (`rollout.name`): `hf` (reference) and `hybrid` (our engine).

Each serves the batch call (`generate`) and the request API (`request_engine()`, a `RequestEngine`)."""

from __future__ import annotations

from hybridrl.rollout.base import (RequestEngine, RolloutBackend, RolloutOutput, SamplingParams, TokenOutput,
                                   resume_request)

BACKEND_NAMES = ("hf", "hybrid")

__all__ = ["BACKEND_NAMES", "RequestEngine", "RolloutBackend", "RolloutOutput", "SamplingParams", "TokenOutput",
           "build_rollout_backend", "resolve_backend_name", "resume_request"]


def resolve_backend_name(name: str, device_type: str) -> str:
    """`auto` → `hybrid` on GPU, `hf` on CPU (the engine's speed comes from GPU kernels)."""
    if name == "auto":
        return "hybrid" if device_type == "cuda" else "hf"
    if name not in BACKEND_NAMES:
        raise ValueError(f"actor_rollout_ref.rollout.name={name!r} is not a hybridrl backend; use one of "
                         f"{('auto',) + BACKEND_NAMES}")
    return name


def build_rollout_backend(name: str, model, *, pad_token_id: int, eos_token_ids, rollout_cfg,
                          device_type: str, tp=None, fp32_residual: bool = True, device=None,
                          batch_invariant: bool = False) -> RolloutBackend:
    """`tp`: this rank's `TensorParallel` in a tensor-parallel engine replica (None: one device). `fp32_residual`:
    the engine's residual stream in fp32 (`actor_rollout_ref.model.fp32_residual_stream`); `batch_invariant`: its
    batch-invariant kernels (`actor_rollout_ref.model.batch_invariant`). `device`: the hybrid
    engine's (None: the current CUDA device); the hf backend generates where `model` is."""
    name = resolve_backend_name(name, device_type)
    if name == "hf" and tp is not None and tp.size > 1:
        raise ValueError("actor_rollout_ref.rollout.tensor_model_parallel_size > 1 needs the hybrid engine; set "
                         "actor_rollout_ref.rollout.name=hybrid or tensor_model_parallel_size=1")
    if name == "hf":
        from hybridrl.rollout.hf_backend import HFRolloutBackend

        return HFRolloutBackend(model, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids)
    from hybridrl.rollout.engine.llm_engine import LLMEngine
    from hybridrl.rollout.engine.parallel import SINGLE

    return LLMEngine(
        model, tokenizer_eos_ids=tuple(eos_token_ids), dtype=_engine_dtype(rollout_cfg.dtype),
        gpu_memory_utilization=rollout_cfg.gpu_memory_utilization, block_size=rollout_cfg.block_size,
        max_num_seqs=rollout_cfg.max_num_seqs, max_num_batched_tokens=rollout_cfg.max_num_batched_tokens,
        max_model_len=rollout_cfg.max_model_len or rollout_cfg.prompt_length + rollout_cfg.response_length,
        enforce_eager=rollout_cfg.enforce_eager, cudagraph_capture_sizes=rollout_cfg.cudagraph_capture_sizes,
        enable_prefix_caching=rollout_cfg.enable_prefix_caching, keep_decode_graphs=rollout_cfg.keep_decode_graphs,
        seed=rollout_cfg.seed if rollout_cfg.seed is not None else 0, tp=tp or SINGLE, fp32_residual=fp32_residual,
        device=device, recompute_kv_after_weight_updates=rollout_cfg.recompute_kv_cache_after_weight_updates,
        batch_invariant=batch_invariant)


def _engine_dtype(name: str):
    from hybridrl.models.hf import resolve_dtype

    return resolve_dtype(name)
