"""The Triton (residual add +) RMSNorm kernel of the rollout engine (rollout/engine/fused_ops.py), one program per
row. With `actor_rollout_ref.model.batch_invariant` the trainer's RMSNorms run it too (models/invariant/hf.py).

It rounds where HF's RMSNorm does: normalise in fp32, round to the input's dtype, multiply by the weight, round to
the weight's dtype (twice for a 16-bit input, once for the fp32 residual stream).
"""

from __future__ import annotations

from typing import overload

import torch
import triton
import triton.language as tl

# Launch options of kernels that round where PyTorch's elementwise code rounds: no contraction of a multiply and an
# add into one FMA, which would skip the product's rounding (rollout/engine/fused_ops.py says what it changed).
ROUND_AS_TORCH = {"enable_fp_fusion": False}


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
    normed = (h * inv).to(x.dtype).to(tl.float32)  # `.to(input dtype)`: a no-op for an fp32 residual stream
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (w * normed).to(out_ptr.dtype.element_ty), mask=mask)


@overload
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: None = None) -> torch.Tensor: ...


@overload
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]: ...


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
             ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`layers.RMSNorm.forward` over the last dimension of x (..., D): normalised x, or (normalised x + residual,
    x + residual), shaped as x. The normalised output is in the weight's dtype, the sum in the wider of x's and the
    residual's (fp32 for a bf16 sub-layer output added to an fp32 residual stream)."""
    rows_in = x.reshape(-1, x.shape[-1])
    rows, dim = rows_in.shape
    res_in = residual.reshape(rows_in.shape) if residual is not None else rows_in
    out = torch.empty(rows_in.shape, dtype=weight.dtype, device=x.device)
    res_out = out
    if residual is not None:
        res_out = torch.empty(rows_in.shape, dtype=torch.promote_types(x.dtype, residual.dtype), device=x.device)
    if rows:
        _rms_norm_kernel[(rows,)](rows_in, res_in, weight, out, res_out, eps, dim, rows_in.stride(0),
                                  res_in.stride(0), out.stride(0), res_out.stride(0), HAS_RESIDUAL=residual is not None,
                                  BLOCK=triton.next_power_of_2(dim), num_warps=4, **ROUND_AS_TORCH)
    return out.view(x.shape) if residual is None else (out.view(x.shape), res_out.view(x.shape))
