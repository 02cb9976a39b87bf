"""What the Triton paged-attention kernels (decode and prefill) require of their inputs, checked before a launch."""

from __future__ import annotations

import torch


def check_paged_inputs(kernel: str, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       block_tables: torch.Tensor, context_lens: torch.Tensor) -> None:
    """q (rows, Hq, D) against k/v caches (num_blocks, block_size, Hkv, D): GQA heads, a power-of-two head dim
    >= 16, contiguous head dims, int32 block tables and context lengths. `kernel` names the kernel in errors."""
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"expected q (rows, Hq, D) and k/v caches (num_blocks, block_size, Hkv, D); got "
                         f"q {tuple(q.shape)}, k {tuple(k_cache.shape)}, v {tuple(v_cache.shape)}")
    head_dim, num_kv_heads = k_cache.shape[3], k_cache.shape[2]
    if q.shape[2] != head_dim or q.shape[1] % num_kv_heads:
        raise ValueError(f"q heads/head_dim {tuple(q.shape[1:])} do not fit the cache's {num_kv_heads} KV "
                         f"heads of dim {head_dim}: Hq must be a multiple of Hkv and head dims equal")
    if head_dim & (head_dim - 1) or head_dim < 16:
        raise ValueError(f"head_dim {head_dim} is not supported by the Triton {kernel} kernel (needs a power "
                         "of two >= 16); use the torch_paged attention backend")
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("q and the KV caches need a contiguous last (head_dim) dimension")
    if block_tables.dtype != torch.int32 or context_lens.dtype != torch.int32:
        raise TypeError(f"block_tables and context_lens must be int32, got {block_tables.dtype} and "
                        f"{context_lens.dtype}")
