"""Triton paged decode attention (GQA-aware, flash-decoding split-K) and the KV-cache store kernel.

Cache layout: `k_cache`, `v_cache` are `(num_blocks, block_size, num_kv_heads, head_dim)`; a sequence's
tokens live in the blocks listed by its row of `block_tables`, `context_lens` bounds the reads.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from hybridrl.rollout.engine.attention.kernel_inputs import check_paged_inputs

# Tokens gathered per inner-loop iteration, independent of the page size: every token's address is
# looked up through the block table, so 64-token tiles (4 pages of 16) keep several loads in flight.
BLOCK_N = 64
# Split-K partitions: at least this many tokens each (below it the reduction kernel costs more than the
# parallelism buys), and at most MAX_SPLITS of them. Partitions are sized from static shapes only.
MIN_SPLIT_TOKENS = 256
MAX_SPLITS = 128
LOG2E = 1.4426950408889634


@triton.jit
def _decode_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, block_tables_ptr, context_lens_ptr,
    qk_scale, window, split_len,
    stride_qb, stride_qh,
    stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_ob, stride_oh, stride_os, stride_lb, stride_lh, stride_bt,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK: tl.constexpr, SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # ~55 lines: one fused kernel (gather, scores, online softmax, PV) so scores never touch memory.
    # One program = (sequence, KV head, split). Each K/V tile is loaded once and scored against all
    # GROUP query heads sharing that KV head: the group is padded to GROUP_PAD >= 16 rows so both
    # products run on tensor cores (tl.dot needs M >= 16). The padded rows waste FLOPs, not bytes,
    # and decode is bandwidth-bound (7 real rows of 16 for Qwen2.5); a broadcast-multiply-sum would
    # need a (GROUP, BLOCK, HEAD_DIM) register tile and run on the FMA units instead.
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    rows = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_DIM)
    row_mask = rows < GROUP
    heads = kv_head * GROUP + rows
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + dims[None, :],
                mask=row_mask[:, None], other=0.0)  # (GROUP_PAD, HEAD_DIM)

    ctx = tl.load(context_lens_ptr + seq)
    first_valid = tl.maximum(ctx - window, 0)  # sliding window: only the last `window` tokens
    split_start = split * split_len
    lo = tl.maximum(split_start, (first_valid // BLOCK) * BLOCK)
    hi = tl.minimum(split_start + split_len, ctx)

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    offs = tl.arange(0, BLOCK)
    table = block_tables_ptr + seq * stride_bt
    for start in range(lo, hi, BLOCK):
        tok = start + offs
        tok_mask = (tok < hi) & (tok >= first_valid)
        page = tl.load(table + tok // PAGE_SIZE, mask=tok < hi, other=0).to(tl.int64)
        slot = tok % PAGE_SIZE
        k = tl.load(k_ptr + page[:, None] * stride_kb + slot[:, None] * stride_kt
                    + kv_head * stride_kh + dims[None, :], mask=tok_mask[:, None], other=0.0)
        v = tl.load(v_ptr + page[:, None] * stride_vb + slot[:, None] * stride_vt
                    + kv_head * stride_vh + dims[None, :], mask=tok_mask[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # (GROUP_PAD, BLOCK), log2 units
        s = tl.where(tok_mask[None, :], s, float("-inf"))
        # The first tile of [lo, hi) always holds a valid token, so m_new is finite from then on.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    has_tokens = l_i > 0  # false for splits that start past the context (or past the window)
    out = acc / tl.where(has_tokens, l_i, 1.0)[:, None]
    out_ptrs = out_ptr + seq * stride_ob + heads[:, None] * stride_oh + split * stride_os + dims[None, :]
    if SPLIT:  # empty partitions store only lse = -inf; the reduction never reads their partials
        tl.store(out_ptrs, out, mask=row_mask[:, None] & has_tokens[:, None])
        lse = tl.where(has_tokens, m_i + tl.log2(tl.where(has_tokens, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + seq * stride_lb + heads * stride_lh + split, lse, mask=row_mask)
    else:
        tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=row_mask[:, None])


@triton.jit
def _reduce_kernel(
    part_ptr, lse_ptr, out_ptr, num_splits,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr, SPLITS_PAD: tl.constexpr,
):
    # One program per (sequence, query head): merge the per-split softmax-normalised partials, weighted
    # by exp2(lse_split - max lse). The split holding the last token is never empty, so max lse is finite.
    seq = tl.program_id(0)
    head = tl.program_id(1)
    splits = tl.arange(0, SPLITS_PAD)
    dims = tl.arange(0, HEAD_DIM)
    split_mask = splits < num_splits
    lse = tl.load(lse_ptr + seq * stride_lb + head * stride_lh + splits, mask=split_mask,
                  other=float("-inf"))
    weights = tl.exp2(lse - tl.max(lse, 0))  # (SPLITS_PAD,), 0 for empty splits
    filled = lse > float("-inf")  # empty splits' partials were never written
    part = tl.load(part_ptr + seq * stride_pb + head * stride_ph + splits[:, None] * stride_ps
                   + dims[None, :], mask=filled[:, None], other=0.0)  # (SPLITS_PAD, HEAD_DIM)
    out = tl.sum(part * weights[:, None], 0) / tl.sum(weights, 0)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def plan_splits(batch: int, num_kv_heads: int, max_tokens: int, num_sms: int) -> tuple[int, int]:
    """(num_splits, tokens per split) from static shapes only: no device sync, so CUDA-graph safe.

    Split when the (sequence, KV head) programs alone would fill < 2 waves of SMs. The actual context
    lengths are unknown here, so partitions are short (MIN_SPLIT_TOKENS) and cover `max_tokens`;
    partitions past a sequence's context exit at once and only cost a launch slot.
    """
    if batch * num_kv_heads >= 2 * num_sms or max_tokens <= MIN_SPLIT_TOKENS:
        return 1, _round_up(max_tokens, BLOCK_N)
    split_len = _round_up(max(MIN_SPLIT_TOKENS, triton.cdiv(max_tokens, MAX_SPLITS)), BLOCK_N)
    return triton.cdiv(max_tokens, split_len), split_len


def _round_up(x: int, multiple: int) -> int:
    return triton.cdiv(x, multiple) * multiple


def _split_buffers(out: torch.Tensor, num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the decode kernel writes: `out` itself, or (B, Hq, S, D) fp32 partials + (B, Hq, S) lse."""
    if num_splits == 1:
        return out, out  # lse unused when SPLIT is false
    batch, num_heads, head_dim = out.shape
    part = torch.empty(batch, num_heads, num_splits, head_dim, device=out.device, dtype=torch.float32)
    return part, torch.empty(batch, num_heads, num_splits, device=out.device, dtype=torch.float32)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                           sliding_window: int | None = None, *, num_splits: int | None = None,
                           block_n: int = BLOCK_N, num_warps: int = 4, num_stages: int = 2) -> torch.Tensor:
    """One decode token per sequence attends to its paged context: q (B, Hq, D) -> (B, Hq, D).

    block_tables int32 (B, max_blocks); context_lens int32 (B,) counts the cached tokens including the
    current one. `num_splits` overrides the split-K heuristic (tests); it must not depend on data.
    `block_n` (tokens per tile), `num_warps`, `num_stages`: tuning knobs (benchmarks/rollout_bench.py sweeps them).
    """
    check_paged_inputs("decode", q, k_cache, v_cache, block_tables, context_lens)
    batch, num_heads, head_dim = q.shape
    page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    max_tokens = block_tables.shape[1] * page_size
    if num_splits is None:
        num_splits, split_len = plan_splits(batch, num_kv_heads, max_tokens, _num_sms(q.device))
    else:
        split_len = triton.cdiv(max_tokens, num_splits)
    split_len = _round_up(split_len, block_n)  # whole tiles per partition (correct either way)
    out = torch.empty_like(q)
    dst, lse = _split_buffers(out, num_splits)
    dst_strides = dst.stride()[:3] if num_splits > 1 else (*out.stride()[:2], 0)
    lse_strides = lse.stride()[:2] if num_splits > 1 else (0, 0)
    window = sliding_window if sliding_window is not None and sliding_window > 0 else max_tokens + 1
    _decode_kernel[(batch, num_kv_heads, num_splits)](
        q, k_cache, v_cache, dst, lse, block_tables, context_lens,
        scale * LOG2E, window, split_len,
        q.stride(0), q.stride(1),
        *k_cache.stride()[:3], *v_cache.stride()[:3],
        *dst_strides, *lse_strides, block_tables.stride(0),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        PAGE_SIZE=page_size, BLOCK=block_n, SPLIT=num_splits > 1,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=num_warps, num_stages=num_stages,
    )
    if num_splits > 1:
        _reduce_kernel[(batch, num_heads)](
            dst, lse, out, num_splits, *dst.stride()[:3], *lse.stride()[:2], *out.stride()[:2],
            HEAD_DIM=head_dim, SPLITS_PAD=max(2, triton.next_power_of_2(num_splits)), num_warps=4,
        )
    return out


@triton.jit
def _store_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                  stride_kn, stride_vn, stride_ck, stride_cv, ROW: tl.constexpr, ROW_PAD: tl.constexpr):
    # One program per new token: copy its (Hkv * D) K and V rows to cache slot `slot` (a flat
    # block_id * block_size + offset index), or skip when slot == -1 (padding, graph rows).
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token)
    cols = tl.arange(0, ROW_PAD)
    mask = (cols < ROW) & ((cols * 0 + slot) >= 0)  # slot broadcast to (ROW_PAD,)
    tl.store(k_cache_ptr + slot * stride_ck + cols, tl.load(k_ptr + token * stride_kn + cols, mask=mask),
             mask=mask)
    tl.store(v_cache_ptr + slot * stride_cv + cols, tl.load(v_ptr + token * stride_vn + cols, mask=mask),
             mask=mask)


def store_kv_cache(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   slot_mapping: torch.Tensor) -> None:
    """Write new tokens' K/V (N, Hkv, D) into the paged caches at `slot_mapping` (int64 (N,), -1 = skip).

    A Triton kernel rather than a torch scatter: skipping the -1 slots in torch needs a boolean
    gather whose size depends on data (a host sync, not capturable in a CUDA graph).
    """
    num_tokens = k.shape[0]
    row = k.shape[1] * k.shape[2]
    if k.shape != v.shape or k.shape[1:] != k_cache.shape[2:] or slot_mapping.shape[0] != num_tokens:
        raise ValueError(f"store_kv_cache: k {tuple(k.shape)}, v {tuple(v.shape)}, cache "
                         f"{tuple(k_cache.shape)} and slot_mapping {tuple(slot_mapping.shape)} disagree")
    if num_tokens == 0:
        return
    # Each token's (Hkv, D) row must be contiguous in both the new K/V and the cache.
    k, v = k.reshape(num_tokens, row), v.reshape(num_tokens, row)
    k_flat = k_cache.view(-1, row)  # (num_blocks * block_size, Hkv * D); fails loudly if not viewable
    v_flat = v_cache.view(-1, row)
    _store_kernel[(num_tokens,)](k, v, k_flat, v_flat, slot_mapping,
                                 k.stride(0), v.stride(0), k_flat.stride(0), v_flat.stride(0),
                                 ROW=row, ROW_PAD=triton.next_power_of_2(row))

