"""A batch-invariant linear layer: `x @ W.T + b` whose every output element is summed in one fixed order.

cuBLAS picks its kernel (tile shape, split-K) by the problem's shape, so the same row times the same weight
rounds differently in a 512-row decode step and in a 20,000-row training micro-batch. This Triton GEMM runs
one configuration for every shape: each output element is accumulated over K in BLOCK_K steps, in order,
by the same `tl.dot` instructions, whatever M and N are. The row's result then depends on the row and the
weight alone, so the engine's fused q/k/v (or gate/up) projection and the trainer's separate ones agree
bit for bit. The bias is added to the fp32 accumulator before the single rounding to the output dtype.

The backward (trainer only) is the plain matmuls: gradients need no invariance.

`agreeing_linear` (the engine's layers): cuBLAS's result at the layouts where cuBLAS sums each element in this
kernel's order (it does whenever it picks a kernel without split-K, which is most shapes), checked once per layout
on a probe that shows the summation order; the kernel elsewhere. Same bits as `linear_forward`, at cuBLAS's speed
where it agrees.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from hybridrl.models.invariant import check_device, needs_grad

BLOCK_K = 64  # the reduction's step: fixed, so every output element is summed in the same order
# (BLOCK_M, BLOCK_N, num_warps, num_stages): how the output is cut into tiles, which changes neither the order nor
# the instructions each element is summed by (on an H200 every configuration measured, BLOCK_K 32 to 128
# included, gave the same bits, and cuBLAS's at these shapes too: benchmarks/README.md, mismatch_bench.py). The
# fastest measured there: narrow tiles for a decode step's narrow outputs, wider ones elsewhere.
NARROW_TILES = (64, 64, 4, 4)  # up to SMALL_M rows and NARROW_N columns
WIDE_TILES = (64, 128, 4, 3)
SMALL_M, NARROW_N = 1024, 2048
# Hopper's TMA kernel, for products of at least TMA_MIN_FLOP multiply-adds (M x N x K): at a 7B decode step's
# gate/up, down and LM head it took 0.6 times the time of the kernel above, and about cuBLAS's at a micro-batch's
# 8192 rows; at a 0.5B decode step's narrow products it was no faster. Same bits as the kernel above.
TMA_TILES = (128, 128, 8, 4)
TMA_MIN_FLOP = 1 << 33


@triton.jit(do_not_specialize=["M", "N"])
def _linear_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                   stride_om, stride_on, HAS_BIAS: tl.constexpr, DOT_PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: an LM head's rows x vocabulary passes 2**31
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_in = (k0 + ks) < K
        x = tl.load(x_ptr + rows[:, None] * stride_xm + (k0 + ks)[None, :] * stride_xk,
                    mask=(rows[:, None] < M) & k_in[None, :], other=0.0)
        w = tl.load(w_ptr + cols[None, :] * stride_wn + (k0 + ks)[:, None] * stride_wk,
                    mask=(cols[None, :] < N) & k_in[:, None], other=0.0)
        acc = tl.dot(x, w, acc, input_precision=DOT_PRECISION)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, acc.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit(do_not_specialize=["M", "N"])
def _tma_linear_kernel(x_desc, w_desc, out_desc, b_ptr, M, N, K, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr):
    # Hopper: tiles loaded by the tensor-memory accelerator, one persistent program per SM walking the output
    # tiles (GROUP_M rows of tiles at a time, for L2 reuse of the weight). Each element's sum: as _linear_kernel's.
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_m * num_n, NUM_PROGRAMS, flatten=False):
        first_m = tile // (GROUP_M * num_n) * GROUP_M
        group_rows = min(num_m - first_m, GROUP_M)
        pid_m = first_m + tile % group_rows
        pid_n = tile % (GROUP_M * num_n) // group_rows
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            acc = tl.dot(x_desc.load([pid_m * BLOCK_M, k0]), w_desc.load([pid_n * BLOCK_N, k0]).T, acc)
        if HAS_BIAS:
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            acc += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        out_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(out_desc.dtype))


def linear_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` for x (..., K), weight (N, K), in x's dtype, summed in the fixed order."""
    check_device(x)
    if x.dtype != weight.dtype:
        raise TypeError(f"batch-invariant linear: input {x.dtype} and weight {weight.dtype} differ; the layer "
                        "computes in one dtype (cast the input as the module's forward would)")
    rows = x.reshape(-1, x.shape[-1])
    n, k = weight.shape
    out = torch.empty(rows.shape[0], n, dtype=x.dtype, device=x.device)
    if rows.shape[0] and _takes_tma(rows, weight, out):
        _tma_linear(rows, weight, bias, out)
    elif rows.shape[0]:
        block_m, block_n, num_warps, num_stages = tiles_for(rows.shape[0], n)
        grid = (triton.cdiv(rows.shape[0], block_m), triton.cdiv(n, block_n))
        _linear_kernel[grid](rows, weight, bias if bias is not None else weight, out, rows.shape[0], n, k,
                             rows.stride(0), rows.stride(1), weight.stride(0), weight.stride(1),
                             out.stride(0), out.stride(1), HAS_BIAS=bias is not None,
                             DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
                             BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=BLOCK_K,
                             num_warps=num_warps, num_stages=num_stages)
    return out.view(*x.shape[:-1], n)


def _takes_tma(rows: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the TMA kernel runs this product: a Hopper-or-later GPU (not the interpreter), 16-bit operands whose
    rows start 16-byte aligned, and a product large enough for its persistent tiles (TMA_MIN_FLOP)."""
    if not rows.is_cuda or rows.dtype == torch.float32 or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    if torch.cuda.get_device_capability(rows.device)[0] < 9:
        return False
    aligned = all(t.stride(-1) == 1 and t.stride(0) * t.element_size() % 16 == 0 and t.data_ptr() % 16 == 0
                  for t in (rows, weight, out))
    return aligned and rows.shape[0] * weight.shape[0] * weight.shape[1] >= TMA_MIN_FLOP


def _tma_linear(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    block_m, block_n, num_warps, num_stages = TMA_TILES
    tiles = triton.cdiv(rows.shape[0], block_m) * triton.cdiv(weight.shape[0], block_n)
    programs = min(tiles, torch.cuda.get_device_properties(rows.device).multi_processor_count)
    _tma_linear_kernel[(programs,)](
        TensorDescriptor.from_tensor(rows, [block_m, BLOCK_K]), TensorDescriptor.from_tensor(weight, [block_n, BLOCK_K]),
        TensorDescriptor.from_tensor(out, [block_m, block_n]), bias if bias is not None else weight, rows.shape[0],
        weight.shape[0], weight.shape[1], HAS_BIAS=bias is not None, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=BLOCK_K, GROUP_M=8, NUM_PROGRAMS=programs, num_warps=num_warps, num_stages=num_stages)


def tiles_for(rows: int, cols: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for an output of `rows` x `cols`."""
    return NARROW_TILES if rows <= SMALL_M and cols <= NARROW_N else WIDE_TILES


class Layout(NamedTuple):
    """What cuBLAS picks its kernel by (besides 16-byte alignment, which `agreeing_linear` requires)."""

    rows: tuple[int, int]
    rows_stride: tuple[int, int]
    weight: tuple[int, int]  # (out, in)
    weight_stride: tuple[int, int]
    dtype: torch.dtype
    device: str
    has_bias: bool


_CUBLAS_AGREES: dict[Layout, bool] = {}  # whether cuBLAS gives the kernel's bits: `agreeing_linear`'s record
CUBLAS_CHECK_MAX_ROWS = 1024  # products of more rows (prefill chunks, all distinct) run the kernel unchecked


def agreeing_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`linear_forward(x, weight, bias)`'s bits, computed by cuBLAS (`F.linear`) at the layouts where cuBLAS gives
    them: checked (`_cublas_agrees`) the first time a layout is seen outside a CUDA-graph capture. A layout first
    seen inside a capture, and products of more than CUBLAS_CHECK_MAX_ROWS rows, run the kernel."""
    rows = x.reshape(-1, x.shape[-1])
    layout = _layout(rows, weight, bias)
    agrees = _CUBLAS_AGREES.get(layout) if layout is not None else False
    if agrees is None and not (rows.is_cuda and torch.cuda.is_current_stream_capturing()):
        agrees = _CUBLAS_AGREES[layout] = _cublas_agrees(rows, weight, bias)
    if agrees:
        return F.linear(rows, weight, bias).view(*x.shape[:-1], weight.shape[0])
    return linear_forward(x, weight, bias)


def _layout(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> Layout | None:
    """The product's layout, or None for one left unchecked (unaligned, no rows or too many, mixed dtypes)."""
    if not 0 < rows.shape[0] <= CUBLAS_CHECK_MAX_ROWS or rows.dtype != weight.dtype:
        return None
    if any(t.data_ptr() % 16 for t in (rows, weight, bias) if t is not None):
        return None
    return Layout(tuple(rows.shape), rows.stride(), tuple(weight.shape), weight.stride(), rows.dtype, str(rows.device),
                  bias is not None)


PROBE_TERM = 2.0 ** 12  # its square, 2**24, leaves fp32 sums of it a resolution of 2: about a random term


def _cublas_agrees(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether cuBLAS sums in the kernel's order at this layout: both run a probe of the same layout whose every
    output element adds +2**24 at its first k and -2**24 at its last, with random terms between, so its rounding
    records how the terms were grouped (two orders disagree in most elements; one order agrees in all). A probe
    the device has no memory for leaves the layout to the kernel."""
    generator = torch.Generator(rows.device).manual_seed(0)  # leaves the device's default generator alone
    try:
        x = torch.empty_strided(rows.shape, rows.stride(), dtype=rows.dtype, device=rows.device)
        w = torch.empty_strided(weight.shape, weight.stride(), dtype=weight.dtype, device=weight.device)
        b = torch.empty_like(bias).normal_(generator=generator) if bias is not None else None
        fill_probe(x, w, generator)
        return torch.equal(F.linear(x, w, b), linear_forward(x, w, b))
    except torch.OutOfMemoryError:
        return False


def fill_probe(x: torch.Tensor, w: torch.Tensor, generator: torch.Generator) -> None:
    """Rows `x` (M, K) and weight `w` (N, K), in place: random terms, with +PROBE_TERM**2 at k = 0 and
    -PROBE_TERM**2 at k = K - 1 in every output element."""
    x.normal_(generator=generator)
    w.normal_(generator=generator)
    x[:, 0], x[:, -1], w[:, 0], w[:, -1] = PROBE_TERM, PROBE_TERM, PROBE_TERM, -PROBE_TERM


def cublas_agreement() -> dict[str, bool]:
    """`agreeing_linear`'s record so far, "rows x in -> out" per checked layout (benchmarks report it)."""
    return {f"{layout.rows[0]} x {layout.weight[1]} -> {layout.weight[0]}{' + bias' if layout.has_bias else ''}": agrees
            for layout, agrees in _CUBLAS_AGREES.items()}


class _InvariantLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return linear_forward(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_rows = grad.reshape(-1, grad.shape[-1])
        grad_x = (grad_rows @ weight).view(x.shape) if ctx.needs_input_grad[0] else None
        grad_w = grad_rows.t() @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[1] else None
        grad_b = grad_rows.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear` with the batch-invariant forward (differentiable; plain matmuls in backward)."""
    if needs_grad(x, weight, bias):
        return _InvariantLinear.apply(x, weight, bias)
    return linear_forward(x, weight, bias)
