"""Attention backends: Triton paged decode + store on CUDA when available, else the pure-torch path.

Prefill always uses the torch path (`torch_paged.paged_prefill_attention`, one batched SDPA call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from hybridrl.rollout.engine.attention import torch_paged


@dataclass(frozen=True)
class AttentionBackend:
    name: str
    store_kv_cache: Callable[..., None]
    paged_decode_attention: Callable[..., torch.Tensor]
    paged_prefill_attention: Callable[..., torch.Tensor] = torch_paged.paged_prefill_attention


TORCH_BACKEND = AttentionBackend("torch", torch_paged.store_kv_cache, torch_paged.paged_decode_attention)


def select_backend(device: torch.device, head_dim: int) -> AttentionBackend:
    """Triton on CUDA when `triton_decode` imports and supports `head_dim`, else pure torch."""
    supported = head_dim >= 16 and head_dim & (head_dim - 1) == 0
    if torch.device(device).type != "cuda" or not supported:
        return TORCH_BACKEND
    try:
        from hybridrl.rollout.engine.attention import triton_decode
    except ImportError:
        return TORCH_BACKEND
    return AttentionBackend("triton", triton_decode.store_kv_cache, triton_decode.paged_decode_attention)
