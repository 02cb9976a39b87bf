"""The engine's half of the batch-invariant numerics (`actor_rollout_ref.model.batch_invariant`).

`use_batch_invariant_kernels(model)` makes the engine compute every token the way the trainer's forward
computes it in this mode (hybridrl/models/invariant/hf.py): the linear layers and the LM head with
`invariant.matmul.linear`'s bits (`agreeing_linear`: by cuBLAS at the layouts where cuBLAS gives them), attention
through `invariant.attention.paged_attention` (`BACKEND`, prefill and decode alike), the RMSNorms through the
engine's Triton kernel on any device (the trainer's run it too), and the recorded log-prob of each sampled token
through `invariant.log_probs.label_log_probs` (`with_invariant_log_probs`). Sampling itself (which token) is
unchanged.
RoPE and SwiGLU keep the engine's fused kernels: they round exactly where the HF model's torch code does.
"""

from __future__ import annotations

import functools
import types
from typing import Callable

import torch
from torch import nn

from hybridrl.models.invariant import check_device
from hybridrl.models.invariant.attention import paged_attention
from hybridrl.models.invariant.hf import linear_module_forward
from hybridrl.models.invariant.log_probs import label_log_probs
from hybridrl.models.invariant.matmul import agreeing_linear
from hybridrl.rollout.engine.attention import AttentionBackend
from hybridrl.rollout.engine.attention.metadata import AttentionMetadata
from hybridrl.rollout.engine.layers import RMSNorm, RowParallelLinear


def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
            context_lens: torch.Tensor, scale: float, sliding_window: int | None = None) -> torch.Tensor:
    return paged_attention(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window)


def _prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, scale: float,
             sliding_window: int | None = None) -> torch.Tensor:
    return paged_attention(q, k_cache, v_cache, meta.block_tables, meta.context_lens, scale, sliding_window,
                           query_start=meta.query_start, max_seqlen_q=meta.max_seqlen_q)


def _backend() -> AttentionBackend:
    from hybridrl.rollout.engine.attention.triton_decode import store_kv_cache

    return AttentionBackend("batch_invariant", store_kv_cache, _decode, _prefill)


_ENGINE_LINEAR = functools.partial(linear_module_forward, product=agreeing_linear)


def _rms_norm_forward(self: RMSNorm, x: torch.Tensor, residual: torch.Tensor | None = None):
    """`RMSNorm.forward` by the Triton kernel on any device (the trainer's RMSNorms run it too)."""
    from hybridrl.models.rms_norm import rms_norm

    return rms_norm(x, self.weight, self.eps, residual)


def use_batch_invariant_kernels(model: nn.Module) -> AttentionBackend:
    """Switch the engine `model`'s layers to the batch-invariant kernels; returns the attention backend its
    layers must use (the model runner binds it)."""
    check_device(next(model.parameters()))
    for module in model.modules():
        if isinstance(module, RowParallelLinear) and module.tp.size > 1:
            raise ValueError("actor_rollout_ref.model.batch_invariant does not support tensor-parallel rollout "
                             "(the all-reduce sums in its own order); set rollout.tensor_model_parallel_size=1")
        if isinstance(module, (nn.Linear, RowParallelLinear)):
            module.forward = types.MethodType(_ENGINE_LINEAR, module)
        elif isinstance(module, RMSNorm):
            module.forward = types.MethodType(_rms_norm_forward, module)
    return _backend()


def with_invariant_log_probs(sampler: Callable, specs, device: torch.device) -> Callable:
    """`sampler` (logits, keys, steps) -> (tokens, log-probs), its log-probs recomputed by `label_log_probs`
    under each row's temperature (1 for greedy rows), as the trainer computes them. `specs`: the batch's
    setting (`decode_step.batch_setting`: one spec for all rows, or one per row)."""
    temps = [1.0 if spec.greedy else spec.temperature for spec in specs]
    temperature = temps[0] if len(temps) == 1 else torch.tensor(temps, dtype=torch.float32, device=device)

    def sample(logits: torch.Tensor, keys: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, _ = sampler(logits, keys, steps)
        return tokens, label_log_probs(logits, tokens, temperature)

    return sample
