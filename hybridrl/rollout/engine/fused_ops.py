"""Triton kernels for the elementwise parts of a decoder layer: (residual add +) RMSNorm, RoPE, SiLU-and-mul.

In eager PyTorch these parts are ~34 small kernels per layer (fp32 casts, pow, mean, rsqrt, the
rotate-half cat, ...): at decode batch sizes each moves a few hundred KB, so launch and tail latency,
not bandwidth, sets their cost; on an H200 they were about half of a 0.5B model's decode step. Each
kernel below replaces one group and rounds to the activation dtype exactly where the HF/PyTorch code
does (e.g. RMSNorm normalises in fp32, rounds, then multiplies by the weight in the activation
dtype), so its output matches the torch path up to fp32 summation order.

Used on CUDA (`layers.py` picks them when the tensor is on a CUDA device); the torch code in
`layers.py` stays the reference and the CPU path. Tested against it under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, eps, dim, stride_x, stride_r, stride_o,
                     stride_ro, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < dim
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        x = (x.to(tl.float32) + tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32))
        x = x.to(res_out_ptr.dtype.element_ty)  # the sum is rounded once, as `x + residual` is
        tl.store(res_out_ptr + row * stride_ro + cols, x, mask=mask)
    h = x.to(tl.float32)
    inv = tl.rsqrt(tl.sum(h * h, axis=0) / dim + eps)
    normed = (h * inv).to(out_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (w * normed).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
             ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`layers.RMSNorm.forward` for 2-D x (N, D): normalised x, or (normalised x + residual, x + residual)."""
    rows, dim = x.shape
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else out
    res_in = residual if residual is not None else x
    if rows:
        _rms_norm_kernel[(rows,)](x, res_in, weight, out, res_out, eps, dim, x.stride(0), res_in.stride(0),
                                  out.stride(0), res_out.stride(0), HAS_RESIDUAL=residual is not None,
                                  BLOCK=triton.next_power_of_2(dim), num_warps=4)
    return out if residual is None else (out, res_out)


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
                                                                 BLOCK=block, num_warps=4)
    return out


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, pos_ptr, stride_t, stride_h, stride_c, num_heads, half,
                 HALF_PAD: tl.constexpr, HEADS_PAD: tl.constexpr):
    tok = tl.program_id(0)
    pos = tl.load(pos_ptr + tok)
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, HALF_PAD)
    dmask = dims < half
    mask = (heads < num_heads)[:, None] & dmask[None, :]
    dtype = x_ptr.dtype.element_ty
    # the table holds [freqs, freqs]: the first half serves both halves; cast as `.to(q.dtype)` does
    cos = tl.load(cos_ptr + pos * stride_c + dims, mask=dmask, other=0.0).to(dtype).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + pos * stride_c + dims, mask=dmask, other=0.0).to(dtype).to(tl.float32)[None, :]
    base = x_ptr + tok * stride_t + heads[:, None] * stride_h + dims[None, :]
    x1 = tl.load(base, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + half, mask=mask, other=0.0).to(tl.float32)
    # x * cos + rotate_half(x) * sin, each product rounded to the activation dtype before the sum
    out1 = (x1 * cos).to(dtype).to(tl.float32) + (-x2 * sin).to(dtype).to(tl.float32)
    out2 = (x2 * cos).to(dtype).to(tl.float32) + (x1 * sin).to(dtype).to(tl.float32)
    tl.store(base, out1.to(dtype), mask=mask)
    tl.store(base + half, out2.to(dtype), mask=mask)


def rotary_inplace(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   rot_dim: int) -> torch.Tensor:
    """Rotate the first `rot_dim` dims of x (N, H, D) in place at `positions` (N,); cos/sin (P, rot_dim)."""
    tokens, heads, head_dim = x.shape
    if x.stride(-1) != 1 or cos.stride(-1) != 1:
        raise ValueError("rotary_inplace needs the last dim of x and of the cos/sin tables contiguous")
    if tokens:
        _rope_kernel[(tokens,)](x, cos, sin, positions, x.stride(0), x.stride(1), cos.stride(0), heads, rot_dim // 2,
                                HALF_PAD=triton.next_power_of_2(rot_dim // 2), HEADS_PAD=triton.next_power_of_2(heads),
                                num_warps=4)
    return x
