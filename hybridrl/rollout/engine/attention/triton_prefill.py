"""Triton paged prefill attention: ragged new tokens attend causally to their paged context (prefix-cache
hits and earlier turns included), flash-attention style, without padding queries or materialising masks.

Why not the torch path on CUDA: it pads every sequence's queries to the longest one and gathers every
sequence's whole block table, so its cost is B x max(new tokens) x table width. A follow-up turn of an
agent loop (a few new tokens over a long context) or a request resumed after an abort (hundreds of new
tokens) pays for the longest row of the batch on every row. Here each program walks only the keys its
queries can see.

Cache layout as in triton_decode.py: `(num_blocks, block_size, num_kv_heads, head_dim)`. Sliding window W
(HF semantics): a query at position i sees keys j with i - W < j <= i.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hybridrl.rollout.engine.attention.kernel_inputs import check_paged_inputs
from hybridrl.rollout.engine.attention.metadata import AttentionMetadata

BLOCK_N = 64  # keys per tile, looked up token by token through the block table (pages of any size)
MAX_BLOCK_M = 64  # queries per program; shorter query runs (follow-up turns) use the next power of two >= 16
LOG2E = 1.4426950408889634


@triton.jit
def _prefill_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, block_tables_ptr, context_lens_ptr, query_start_ptr,
    qk_scale, window,
    stride_qn, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
    stride_on, stride_oh, stride_bt,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # One program = (sequence, tile of BLOCK_M of its new tokens, query head). The new tokens are the last
    # q_len of the sequence's ctx tokens, so query row r sits at absolute position ctx - q_len + r.
    seq = tl.program_id(0)
    tile = tl.program_id(1)
    head = tl.program_id(2)
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    if tile * BLOCK_M < q_len:
        ctx = tl.load(context_lens_ptr + seq)
        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        row_mask = rows < q_len
        q_pos = ctx - q_len + rows
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(q_ptr + (q_start + rows)[:, None] * stride_qn + head * stride_qh + dims[None, :],
                    mask=row_mask[:, None], other=0.0)  # (BLOCK_M, HEAD_DIM)
        kv_head = head // GROUP
        first_pos = ctx - q_len + tile * BLOCK_M
        hi = tl.minimum(first_pos + BLOCK_M, ctx)  # past the tile's last query: causally invisible
        lo = (tl.maximum(first_pos - window + 1, 0) // BLOCK_N) * BLOCK_N
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        offs = tl.arange(0, BLOCK_N)
        table = block_tables_ptr + seq * stride_bt
        for start in range(lo, hi, BLOCK_N):
            tok = start + offs
            in_range = tok < hi
            page = tl.load(table + tok // PAGE_SIZE, mask=in_range, other=0).to(tl.int64)
            slot = tok % PAGE_SIZE
            k = tl.load(k_ptr + page[:, None] * stride_kb + slot[:, None] * stride_kt + kv_head * stride_kh
                        + dims[None, :], mask=in_range[:, None], other=0.0)
            v = tl.load(v_ptr + page[:, None] * stride_vb + slot[:, None] * stride_vt + kv_head * stride_vh
                        + dims[None, :], mask=in_range[:, None], other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), log2 units
            visible = (tok[None, :] <= q_pos[:, None]) & (tok[None, :] > q_pos[:, None] - window)
            s = tl.where(visible & in_range[None, :], s, float("-inf"))
            # A row may see no key of a tile (sliding window): keep its running max finite so that
            # exp2(-inf - m) is 0 rather than exp2(-inf + inf) = NaN.
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_safe)
            p = tl.exp2(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
            m_i = m_new
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(out_ptr + (q_start + rows)[:, None] * stride_on + head * stride_oh + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_mask[:, None])


def _check_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata) -> None:
    if meta.query_start is None or meta.query_start.dtype != torch.int32:
        raise TypeError("prefill metadata needs query_start as int32 (B + 1,) offsets of each sequence's new tokens")
    check_paged_inputs("prefill", q, k_cache, v_cache, meta.block_tables, meta.context_lens)


def query_block_size(max_seqlen_q: int) -> int:
    """Queries per program: the longest run's next power of two, between 16 (tl.dot's minimum) and 64."""
    return min(MAX_BLOCK_M, max(16, triton.next_power_of_2(max_seqlen_q)))


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                            scale: float, sliding_window: int | None = None, *, num_warps: int = 4,
                            num_stages: int = 2) -> torch.Tensor:
    """Each sequence's new tokens attend to its cached context (their own K/V already stored):
    q (N, Hq, D) flattened in `meta.query_start` order -> (N, Hq, D)."""
    _check_inputs(q, k_cache, v_cache, meta)
    num_heads, head_dim = q.shape[1], q.shape[2]
    page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    batch = meta.block_tables.shape[0]
    block_m = query_block_size(meta.max_seqlen_q)
    max_tokens = meta.block_tables.shape[1] * page_size
    window = sliding_window if sliding_window is not None and sliding_window > 0 else max_tokens + 1
    out = torch.empty_like(q)
    if q.shape[0] == 0:
        return out
    _prefill_kernel[(batch, triton.cdiv(meta.max_seqlen_q, block_m), num_heads)](
        q, k_cache, v_cache, out, meta.block_tables, meta.context_lens, meta.query_start,
        scale * LOG2E, window,
        q.stride(0), q.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3],
        out.stride(0), out.stride(1), meta.block_tables.stride(0),
        GROUP=num_heads // num_kv_heads, HEAD_DIM=head_dim, PAGE_SIZE=page_size, BLOCK_M=block_m, BLOCK_N=BLOCK_N,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", num_warps=num_warps, num_stages=num_stages,
    )
    return out
