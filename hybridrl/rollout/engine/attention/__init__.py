"""Attention backends: Triton paged prefill, decode and KV store on CUDA when available, else the pure-torch
path (CPU, and head sizes the kernels do not take)."""

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
    paged_prefill_attention: Callable[..., torch.Tensor]
    # whether a decode step on it can be captured in a CUDA graph (no host syncs, no data-dependent shapes)
    capturable: bool = True


# not capturable: its store_kv_cache drops slot -1 rows with a boolean gather (a host sync)
TORCH_BACKEND = AttentionBackend("torch", torch_paged.store_kv_cache, torch_paged.paged_decode_attention,
                                 torch_paged.paged_prefill_attention, capturable=False)


def select_backend(device: torch.device, head_dim: int) -> AttentionBackend:
    """Triton on CUDA when the kernels import and support `head_dim`, else pure torch."""
    supported = head_dim >= 16 and head_dim & (head_dim - 1) == 0
    if torch.device(device).type != "cuda" or not supported:
        return TORCH_BACKEND
    try:
        from hybridrl.rollout.engine.attention import triton_decode, triton_prefill
    except ImportError:
        return TORCH_BACKEND
    return AttentionBackend("triton", triton_decode.store_kv_cache, triton_decode.paged_decode_attention,
                            triton_prefill.paged_prefill_attention)
