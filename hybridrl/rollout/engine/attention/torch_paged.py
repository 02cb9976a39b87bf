"""Pure-torch paged attention: the reference path (CPU and head sizes the Triton kernels do not take).

Cache layout: `k_cache`, `v_cache` are `(num_blocks, block_size, num_kv_heads, head_dim)`. A sequence's
token at position p lives at slot `block_tables[b, p // block_size] * block_size + p % block_size`.
Sliding window W (HF semantics): a query at position i sees keys at positions j with i - W < j <= i.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hybridrl.rollout.engine.attention.metadata import AttentionMetadata


def store_kv_cache(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """Write new tokens' K/V (N, Hkv, D) at `slot_mapping` (int64 (N,), -1 = skip)."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k[keep].to(k_cache.dtype))
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v[keep].to(v_cache.dtype))


def gather_context(cache: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """(num_blocks, bs, Hkv, D) paged by (B, M) block tables -> (B, M * bs, Hkv, D) contiguous context."""
    batch, num_blocks = block_tables.shape
    return cache[block_tables.long()].reshape(batch, num_blocks * cache.shape[1], *cache.shape[2:])


def key_mask(q_pos: torch.Tensor, context_lens: torch.Tensor, num_keys: int,
             sliding_window: int | None) -> torch.Tensor:
    """Which keys each query sees: q_pos (B, Q) absolute positions -> bool (B, Q, K)."""
    k_pos = torch.arange(num_keys, device=q_pos.device)
    mask = (k_pos <= q_pos[..., None]) & (k_pos < context_lens[:, None, None])
    if sliding_window:
        mask &= k_pos > q_pos[..., None] - sliding_window
    return mask


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """q (B, Q, Hq, D), k/v (B, K, Hkv, D), mask (B, Q, K) -> (B, Q, Hq, D); GQA without expanding K/V."""
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask[:, None],
        scale=scale, enable_gqa=q.shape[2] != k.shape[2])
    return out.transpose(1, 2)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                           sliding_window: int | None = None) -> torch.Tensor:
    """One query per sequence, q (B, Hq, D) at position context_lens - 1 -> (B, Hq, D)."""
    k = gather_context(k_cache, block_tables)
    v = gather_context(v_cache, block_tables)
    q_pos = (context_lens.long() - 1)[:, None]
    mask = key_mask(q_pos, context_lens.long(), k.shape[1], sliding_window)
    return attend(q[:, None], k.to(q.dtype), v.to(q.dtype), mask, scale)[:, 0]


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                            scale: float, sliding_window: int | None = None) -> torch.Tensor:
    """Ragged prefill whose K/V (incl. prefix-cache context) are already stored in the cache.

    q (N, Hq, D) flattened over sequences in meta.query_start order; sequence b's queries are its last tokens,
    ending at position meta.context_lens[b] - 1. Queries are padded to (B, max_seqlen_q) for one batched SDPA
    call -> (N, Hq, D).
    """
    cache = meta.torch_prefill_cache
    if "grid" not in cache:
        cache["grid"] = query_grid(meta.query_start, q.shape[0])
    seq_idx, q_idx, query_lens = cache["grid"]
    q_pad = q.new_zeros(meta.block_tables.shape[0], meta.max_seqlen_q, *q.shape[1:])
    q_pad[seq_idx, q_idx] = q
    k = gather_context(k_cache, meta.block_tables)
    v = gather_context(v_cache, meta.block_tables)
    if sliding_window not in cache:
        cache[sliding_window] = prefill_mask(meta.context_lens, query_lens, meta.max_seqlen_q, k.shape[1],
                                             sliding_window)
    out = attend(q_pad, k.to(q.dtype), v.to(q.dtype), cache[sliding_window], scale)
    return out[seq_idx, q_idx]


def query_grid(query_start: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each flattened token's (sequence, query index) in the padded grid, and each sequence's query count, from
    the (B + 1,) offsets; `num_tokens` (known on the host) sizes the result without a device sync."""
    starts = query_start.long()
    query_lens = starts[1:] - starts[:-1]
    seq_idx = torch.repeat_interleave(torch.arange(len(query_lens), device=starts.device), query_lens,
                                      output_size=num_tokens)
    q_idx = torch.arange(num_tokens, device=starts.device) - starts[seq_idx]
    return seq_idx, q_idx, query_lens


def prefill_mask(context_lens: torch.Tensor, query_lens: torch.Tensor, max_seqlen_q: int, num_keys: int,
                 sliding_window: int | None) -> torch.Tensor:
    """bool (B, max_seqlen_q, num_keys): which keys each padded query row sees; padded rows see key 0 (a
    row with no keys would make NaN; their outputs are dropped)."""
    ctx = context_lens.long()
    q_pos = (ctx - query_lens)[:, None] + torch.arange(max_seqlen_q, device=ctx.device)
    mask = key_mask(q_pos, ctx, num_keys, sliding_window)
    mask[:, :, 0] |= ~mask.any(-1)
    return mask
