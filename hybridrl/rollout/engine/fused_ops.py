"""Triton kernels for the elementwise parts of a decoder layer: (residual add +) RMSNorm, RoPE with the
KV-cache write, SiLU-and-mul.

In eager PyTorch these parts are ~34 small kernels per layer (fp32 casts, pow, mean, rsqrt, the
rotate-half cat, ...): at decode batch sizes each moves a few hundred KB, so launch and tail latency,
not bandwidth, sets their cost; on an H200 they were about half of a 0.5B model's decode step. Each
kernel (RMSNorm's is in models/rms_norm.py, which the trainer shares) replaces one group and rounds
exactly where the HF/PyTorch code does (e.g. RMSNorm
normalises in fp32, rounds to its input's dtype, then multiplies by the weight and rounds to the
weight's dtype: twice for a bf16 input, once for the fp32 residual stream), so its output matches the
torch path up to fp32 summation order.

They launch with `enable_fp_fusion=False`: with fusion on, Triton turns "multiply, round to bf16, add" into one
bf16 FMA (PTX `fma.rn.bf16`), which skips the product's rounding; the RoPE kernel then differed from the torch
code in about 18% of q elements on an H200. Without it the RoPE and SiLU kernels match the torch code bit for bit.

Used on CUDA (`layers.py` picks them when the tensor is on a CUDA device); the torch code in
`layers.py` stays the reference and the CPU path. Tested against it under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hybridrl.models.rms_norm import ROUND_AS_TORCH, rms_norm  # noqa: F401  (the engine's layers call rms_norm here)


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, inter, stride_x, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)  # F.silu rounds here
    tl.store(out_ptr + row * stride_o + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gate_up (N, 2I) = [gate | up] -> (N, I)."""
    rows, width = gate_up.shape
    inter = width // 2
    out = torch.empty(rows, inter, dtype=gate_up.dtype, device=gate_up.device)
    block = 1024
    if rows:
        _silu_and_mul_kernel[(rows, triton.cdiv(inter, block))](gate_up, out, inter, gate_up.stride(0), out.stride(0),
                                                                 BLOCK=block, num_warps=4, **ROUND_AS_TORCH)
    return out


@triton.jit
def _rotate_heads(x_ptr, out_ptr, out_head_stride, cos, sin, num_heads, half, head_dim,
                  HALF_PAD: tl.constexpr, HEADS_PAD: tl.constexpr, PASS_PAD: tl.constexpr):
    # One token's heads: rows of head_dim at x_ptr, rotated into rows `out_head_stride` apart at out_ptr.
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, HALF_PAD)
    mask = (heads < num_heads)[:, None] & (dims < half)[None, :]
    dtype = x_ptr.dtype.element_ty
    src = x_ptr + heads[:, None] * head_dim + dims[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + half, mask=mask, other=0.0).to(tl.float32)
    # x * cos + rotate_half(x) * sin, each product rounded to the activation dtype before the sum
    out1 = (x1 * cos).to(dtype).to(tl.float32) + (-x2 * sin).to(dtype).to(tl.float32)
    out2 = (x2 * cos).to(dtype).to(tl.float32) + (x1 * sin).to(dtype).to(tl.float32)
    dst = out_ptr + heads[:, None] * out_head_stride + dims[None, :]
    tl.store(dst, out1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + half, out2.to(out_ptr.dtype.element_ty), mask=mask)
    if PASS_PAD > 0:  # partial rotary: dims [2 * half, head_dim) pass through
        rest = 2 * half + tl.arange(0, PASS_PAD)
        pass_mask = (heads < num_heads)[:, None] & (rest < head_dim)[None, :]
        kept = tl.load(x_ptr + heads[:, None] * head_dim + rest[None, :], mask=pass_mask, other=0.0)
        tl.store(out_ptr + heads[:, None] * out_head_stride + rest[None, :], kept.to(out_ptr.dtype.element_ty),
                 mask=pass_mask)


@triton.jit
def _rope_store_kernel(q_ptr, k_ptr, v_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr, k_cache_ptr, v_cache_ptr,
                       stride_q, stride_k, stride_v, stride_c, stride_slot, num_q_heads, num_kv_heads, half,
                       head_dim, HALF_PAD: tl.constexpr, Q_HEADS_PAD: tl.constexpr, KV_HEADS_PAD: tl.constexpr,
                       PASS_PAD: tl.constexpr, ROW_PAD: tl.constexpr):
    # One program per token: rotate its query heads in place, write its rotated key heads and its value
    # heads to cache slot `slot` (skipped when slot == -1: padding, graph rows). Heads are contiguous
    # rows of head_dim in q/k/v and in the cache (layout (num_blocks, block_size, Hkv, D)).
    tok = tl.program_id(0)
    pos = tl.load(pos_ptr + tok)
    dims = tl.arange(0, HALF_PAD)
    dmask = dims < half
    dtype = q_ptr.dtype.element_ty
    # the table holds [freqs, freqs]: the first half serves both halves; cast as `.to(q.dtype)` does
    cos = tl.load(cos_ptr + pos * stride_c + dims, mask=dmask, other=0.0).to(dtype).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + pos * stride_c + dims, mask=dmask, other=0.0).to(dtype).to(tl.float32)[None, :]
    q_row = q_ptr + tok * stride_q
    _rotate_heads(q_row, q_row, head_dim, cos, sin, num_q_heads, half, head_dim, HALF_PAD, Q_HEADS_PAD, PASS_PAD)
    slot = tl.load(slot_ptr + tok)
    if slot >= 0:
        _rotate_heads(k_ptr + tok * stride_k, k_cache_ptr + slot * stride_slot, head_dim, cos, sin, num_kv_heads,
                      half, head_dim, HALF_PAD, KV_HEADS_PAD, PASS_PAD)
        cols = tl.arange(0, ROW_PAD)
        row_mask = cols < num_kv_heads * head_dim
        v = tl.load(v_ptr + tok * stride_v + cols, mask=row_mask)
        tl.store(v_cache_ptr + slot * stride_slot + cols, v.to(v_cache_ptr.dtype.element_ty), mask=row_mask)


def rotary_store_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor,
                    sin: torch.Tensor, rot_dim: int, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    slot_mapping: torch.Tensor) -> torch.Tensor:
    """RoPE and the KV-cache write in one kernel: rotate the first `rot_dim` dims of q (N, Hq, D) in place
    and of k (N, Hkv, D) into the cache, copy v (N, Hkv, D) there too, at `slot_mapping` (int64 (N,),
    -1 = skip); cos/sin (P, rot_dim) indexed by `positions` (N,). Returns q. Replaces RotaryEmbedding
    followed by the attention backend's `store_kv_cache`: three launches per layer become one."""
    tokens, q_heads, head_dim = q.shape
    kv_heads = k.shape[1]
    _check_rope_store(q, k, v, cos, k_cache, v_cache, slot_mapping)
    if tokens:
        pass_dims = head_dim - rot_dim
        _rope_store_kernel[(tokens,)](
            q, k, v, cos, sin, positions, slot_mapping, k_cache, v_cache, q.stride(0), k.stride(0), v.stride(0),
            cos.stride(0), kv_heads * head_dim, q_heads, kv_heads, rot_dim // 2, head_dim,
            HALF_PAD=triton.next_power_of_2(rot_dim // 2), Q_HEADS_PAD=triton.next_power_of_2(q_heads),
            KV_HEADS_PAD=triton.next_power_of_2(kv_heads),
            PASS_PAD=triton.next_power_of_2(pass_dims) if pass_dims else 0,
            ROW_PAD=triton.next_power_of_2(kv_heads * head_dim), num_warps=4, **ROUND_AS_TORCH)
    return q


def _check_rope_store(q, k, v, cos, k_cache, v_cache, slot_mapping) -> None:
    head_dim, kv_heads = q.shape[2], k.shape[1]
    if k.shape != v.shape or k.shape[2] != head_dim or k_cache.shape != v_cache.shape \
            or tuple(k_cache.shape[2:]) != (kv_heads, head_dim) or slot_mapping.shape[0] != q.shape[0]:
        raise ValueError(f"rotary_store_kv: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, cache "
                         f"{tuple(k_cache.shape)} and slot_mapping {tuple(slot_mapping.shape)} disagree")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.stride(2) != 1 or x.stride(1) != head_dim:
            raise ValueError(f"rotary_store_kv needs each token's {name} heads as contiguous rows of head_dim")
    if cos.stride(-1) != 1 or not k_cache.is_contiguous() or not v_cache.is_contiguous():
        raise ValueError("rotary_store_kv needs contiguous cos/sin rows and contiguous KV caches")
