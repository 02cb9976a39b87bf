"""Batch-invariant causal attention: one query token's output computed the same way wherever it is computed.

The engine attends from a paged KV cache (a decode step's one token per sequence, a prefill's run of new
tokens); the trainer attends over whole rows of a micro-batch. Their usual kernels (split-KV decode,
FlashAttention) group the keys differently, so the same query rounds differently on each side. Here one
Triton kernel serves all three layouts (`MODE`: dense rows, paged prefill, paged decode), and each program
computes one query token for the query heads of one KV head, the same way in every mode: the keys it sees
(positions 0..p, or the sliding window) in tiles of BLOCK_N starting at position 0 (window: at its tile),
QKᵀ and PV by `tl.dot` on a (GROUP_PAD, HEAD_DIM) query tile, an online softmax in fp32. Only the address
of a key differs between layouts; the arithmetic, the tile sizes and the order are shared, so the trainer's
log-prob of a token equals the engine's.

Cache layout (paged modes): `(num_blocks, block_size, num_kv_heads, head_dim)`. Dense rows: q (B, Hq, T, D),
k/v (B, Hkv, T, D) (transformers' layout), row b's tokens in columns starts[b]..T-1 at positions 0, 1, ...
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hybridrl.models.invariant import check_device

BLOCK_N = 64  # keys per tile
LOG2E = 1.4426950408889634
DENSE, PAGED_PREFILL, PAGED_DECODE = 0, 1, 2


@triton.jit
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, starts_ptr, block_tables_ptr, context_lens_ptr, query_start_ptr,
    qk_scale, window,
    stride_qb, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_ob, stride_ot, stride_oh, stride_bt,
    MODE: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    seq = tl.program_id(0)
    col = tl.program_id(1)
    kv_head = tl.program_id(2)
    # Where this program's query sits: row `q_row` of q/out (within batch row `seq` in the dense layout), at
    # position `pos` of its sequence; its keys are positions 0..pos, at `key_base` + position (dense).
    if MODE == 0:
        start = tl.load(starts_ptr + seq)
        q_row = col
        pos = col - start
        key_base = start
        q_batch = seq
    elif MODE == 1:
        q_start = tl.load(query_start_ptr + seq)
        q_len = tl.load(query_start_ptr + seq + 1) - q_start
        q_row = q_start + col
        pos = tl.load(context_lens_ptr + seq) - q_len + col
        key_base = 0
        q_batch = 0
    else:
        q_row = seq
        pos = tl.load(context_lens_ptr + seq) - 1
        key_base = 0
        q_batch = 0
    active = pos >= 0
    if MODE == 1:
        active = col < q_len
    heads = kv_head * GROUP + tl.arange(0, GROUP_PAD)
    head_mask = tl.arange(0, GROUP_PAD) < GROUP
    dims = tl.arange(0, HEAD_DIM)
    out_ptrs = out_ptr + q_batch * stride_ob + q_row * stride_ot + heads[:, None] * stride_oh + dims[None, :]
    if active:
        q = tl.load(q_ptr + q_batch * stride_qb + q_row * stride_qt + heads[:, None] * stride_qh + dims[None, :],
                    mask=head_mask[:, None], other=0.0)  # (GROUP_PAD, HEAD_DIM)
        lo = (tl.maximum(pos - window + 1, 0) // BLOCK_N) * BLOCK_N
        m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        l_i = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
        offs = tl.arange(0, BLOCK_N)
        for tile in range(lo, pos + 1, BLOCK_N):
            key = tile + offs
            visible = (key <= pos) & (key > pos - window)
            if MODE == 0:
                k_rows = k_ptr + seq * stride_kb + (key_base + key)[:, None] * stride_kt
                v_rows = v_ptr + seq * stride_vb + (key_base + key)[:, None] * stride_vt
            else:
                page = tl.load(block_tables_ptr + seq * stride_bt + key // PAGE_SIZE, mask=visible, other=0)
                slot = page.to(tl.int64) * PAGE_SIZE + key % PAGE_SIZE
                k_rows = k_ptr + slot[:, None] * stride_kt
                v_rows = v_ptr + slot[:, None] * stride_vt
            k = tl.load(k_rows + kv_head * stride_kh + dims[None, :], mask=visible[:, None], other=0.0)
            v = tl.load(v_rows + kv_head * stride_vh + dims[None, :], mask=visible[:, None], other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # (GROUP_PAD, BLOCK_N), log2 units
            s = tl.where(visible[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))  # every tile holds a visible key: finite
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
            m_i = m_new
        out = acc / l_i[:, None]
        tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=head_mask[:, None])
    elif MODE != 1:  # a padding column of a dense row, a padding row of a decode batch (a prefill: no such row)
        tl.store(out_ptrs, tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32).to(out_ptr.dtype.element_ty),
                 mask=head_mask[:, None])


def _check_head_dim(head_dim: int) -> None:
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise ValueError(f"batch-invariant attention needs a power-of-two head_dim >= 16, got {head_dim}; "
                         "set actor_rollout_ref.model.batch_invariant=false for this model")


def _launch(grid, q, k, v, out, scale: float, window: int, strides, mode: int, num_heads: int, num_kv_heads: int,
            page_size: int = 1, starts=None, block_tables=None, context_lens=None, query_start=None) -> None:
    check_device(q)
    head_dim = q.shape[-1]
    _check_head_dim(head_dim)
    group = num_heads // num_kv_heads
    dummy = context_lens if context_lens is not None else starts
    _attention_kernel[grid](
        q, k, v, out, starts if starts is not None else dummy, block_tables if block_tables is not None else dummy,
        dummy, query_start if query_start is not None else dummy, scale * LOG2E, window, *strides,
        block_tables.stride(0) if block_tables is not None else 0,
        MODE=mode, GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        PAGE_SIZE=page_size, BLOCK_N=BLOCK_N, DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=4, num_stages=2)


def _window(sliding_window: int | None, longest: int) -> int:
    return sliding_window if sliding_window else longest + 1


def dense_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, starts: torch.Tensor, scale: float,
                           sliding_window: int | None = None) -> torch.Tensor:
    """q (B, Hq, T, D), k/v (B, Hkv, T, D); row b's tokens in columns starts[b] (int32 (B,)) .. T-1 ->
    (B, T, Hq, D) (zeros in padding columns)."""
    batch, num_heads, width, head_dim = q.shape
    out = torch.empty(batch, width, num_heads, head_dim, dtype=q.dtype, device=q.device)
    if out.numel():
        strides = (q.stride(0), q.stride(2), q.stride(1), k.stride(0), k.stride(2), k.stride(1),
                   v.stride(0), v.stride(2), v.stride(1), out.stride(0), out.stride(1), out.stride(2))
        _launch((batch, width, k.shape[1]), q, k, v, out, scale, _window(sliding_window, width), strides, DENSE,
                num_heads, k.shape[1], starts=starts)
    return out


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                    context_lens: torch.Tensor, scale: float, sliding_window: int | None = None,
                    query_start: torch.Tensor | None = None, max_seqlen_q: int = 1) -> torch.Tensor:
    """q (N, Hq, D) -> (N, Hq, D) from the paged caches. Decode (`query_start` None): row b is sequence b's one
    token at position context_lens[b] - 1. Prefill: sequence b's new tokens are rows query_start[b]..
    query_start[b + 1] - 1, the last of its context_lens[b] tokens (their K/V already stored)."""
    num_tokens, num_heads, head_dim = q.shape
    page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    if num_tokens == 0:
        return out
    strides = (0, q.stride(0), q.stride(1), 0, k_cache.stride(1), k_cache.stride(2), 0, v_cache.stride(1),
               v_cache.stride(2), 0, out.stride(0), out.stride(1))
    longest = block_tables.shape[1] * page_size
    if query_start is None:
        grid, mode = (num_tokens, 1, num_kv_heads), PAGED_DECODE
    else:
        grid, mode = (block_tables.shape[0], max_seqlen_q, num_kv_heads), PAGED_PREFILL
    _launch(grid, q, k_cache, v_cache, out, scale, _window(sliding_window, longest), strides, mode, num_heads,
            num_kv_heads, page_size=page_size, block_tables=block_tables, context_lens=context_lens,
            query_start=query_start)
    return out
