"""Token log-probs (and entropies) from hidden states through the LM head, with Triton row kernels.

The torch path (`logprob._chunk_token_stats` under checkpoint) makes a dozen full passes over
each chunk's fp32 (C, V) logits in forward and backward (cast, scale, log-sum-exp, gather, softmax,
their backward ops); with a 151,936-token vocabulary that was about half of an H200 actor update.
Here each chunk's logits stay in the GEMM's dtype and are read once by a row kernel (log-sum-exp,
label log-prob, entropy, Σπ²) in forward; backward recomputes the chunk's logits and one row kernel turns
them, in place, into d loss / d logits, which two GEMMs take to the hidden states and the head.

Gradients: with z = logits / T, p = softmax(z), lp = z_y − lse and H = lse − Σ p z,
d lp / d z = onehot_y − p and d H / d z = −p (z − lse + H). Σπ² = Σ exp(2(z − m)) / (Σ exp(z − m))², over the
same running max m, carries no gradient (the optimal token baseline reads it as data).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from hybridrl.models.invariant.hf import in_compute_dtype
from hybridrl.models.invariant.log_probs import label_log_probs
from hybridrl.models.invariant.matmul import linear_forward

BLOCK_V = 2048


@triton.jit
def _forward_kernel(logits_ptr, labels_ptr, lse_ptr, logprob_ptr, entropy_ptr, sum_sq_ptr, vocab, stride_row,
                    inv_temperature, ENTROPY: tl.constexpr, SUM_PI_SQUARED: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    run_max = tl.full([BLOCK], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK], tl.float32)
    run_pz = tl.zeros([BLOCK], tl.float32)  # Σ exp(z − max) · z per lane, for the entropy
    run_sq = tl.zeros([BLOCK], tl.float32)  # Σ exp(2(z − max)) per lane, for Σπ²
    base = logits_ptr + row.to(tl.int64) * stride_row
    for start in range(0, vocab, BLOCK):
        ids = start + offs
        z = tl.load(base + ids, mask=ids < vocab, other=float("-inf")).to(tl.float32) * inv_temperature
        new_max = tl.maximum(run_max, z)
        safe = tl.where(new_max == float("-inf"), 0.0, new_max)
        scale = tl.exp(run_max - safe)
        e = tl.exp(z - safe)
        run_sum = run_sum * scale + e
        if ENTROPY:
            run_pz = run_pz * scale + e * tl.where(z == float("-inf"), 0.0, z)  # masked lanes: e = 0
        if SUM_PI_SQUARED:
            run_sq = run_sq * scale * scale + e * e
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    lane_scale = tl.exp(run_max - row_max)
    total = tl.sum(run_sum * lane_scale, axis=0)
    lse = row_max + tl.log(total)
    label = tl.load(labels_ptr + row)
    z_label = tl.load(base + label).to(tl.float32) * inv_temperature
    tl.store(lse_ptr + row, lse)
    tl.store(logprob_ptr + row, z_label - lse)
    if ENTROPY:
        tl.store(entropy_ptr + row, lse - tl.sum(run_pz * lane_scale, axis=0) / total)
    if SUM_PI_SQUARED:  # Σ e² and total share the row max, so Σπ² = Σ e² / total² lies in (0, 1]
        tl.store(sum_sq_ptr + row, tl.sum(run_sq * lane_scale * lane_scale, axis=0) / (total * total))


@triton.jit
def _backward_kernel(logits_ptr, labels_ptr, lse_ptr, entropy_ptr, grad_lp_ptr, grad_ent_ptr, vocab, stride_row,
                     inv_temperature, ENTROPY_GRAD: tl.constexpr, BLOCK: tl.constexpr):
    """Overwrite one row of logits with d loss / d logits (in the logits' dtype)."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    base = logits_ptr + row.to(tl.int64) * stride_row
    lse = tl.load(lse_ptr + row)
    label = tl.load(labels_ptr + row)
    g_lp = tl.load(grad_lp_ptr + row)
    if ENTROPY_GRAD:
        g_ent = tl.load(grad_ent_ptr + row)
        shift = tl.load(entropy_ptr + row) - lse
    for start in range(0, vocab, BLOCK):
        ids = start + offs
        mask = ids < vocab
        z = tl.load(base + ids, mask=mask, other=0.0).to(tl.float32) * inv_temperature
        p = tl.exp(z - lse)
        grad = g_lp * (tl.where(ids == label, 1.0, 0.0) - p)
        if ENTROPY_GRAD:
            grad -= g_ent * p * (z + shift)
        tl.store(base + ids, (grad * inv_temperature).to(logits_ptr.dtype.element_ty), mask=mask)


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, batch_invariant: bool
            ) -> torch.Tensor:
    """A chunk's logits; `batch_invariant`: by the rollout engine's LM-head kernel (models/invariant), in the
    forward's compute dtype as the engine holds the weights, for the forward and its recomputation alike."""
    if batch_invariant:
        weight, hidden, bias = in_compute_dtype(weight, hidden, bias)
        return linear_forward(hidden, weight, bias)
    return F.linear(hidden.to(weight.dtype) if not torch.is_autocast_enabled() else hidden, weight, bias).contiguous()


def _row_stats(logits: torch.Tensor, labels: torch.Tensor, temperature: float, flags: tuple[bool, bool],
               outputs: tuple[torch.Tensor, ...]) -> None:
    """Per row of `logits`, into the given (rows,) fp32 slices `outputs`: log-sum-exp, label log-prob, entropy,
    Σπ² (`flags`: entropy, Σπ²)."""
    rows, vocab = logits.shape
    if rows:
        _forward_kernel[(rows,)](logits, labels, *outputs, vocab, logits.stride(0), 1.0 / temperature,
                                 ENTROPY=flags[0], SUM_PI_SQUARED=flags[1], BLOCK=BLOCK_V, num_warps=8)


class FusedLinearLogprob(torch.autograd.Function):
    """(hidden (N, H), weight (V, H), bias, labels (N,)) -> (log-probs (N,), entropy (N,) or empty, Σπ² (N,) or
    empty) in fp32; Σπ² is not differentiable."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, hidden, weight, bias, labels, temperature: float, chunk_size: int, compute_entropy: bool,
                compute_sum_pi_squared: bool, batch_invariant: bool):
        lse, logprobs, entropy, sum_sq = (torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
                                          for _ in range(4))
        for start in range(0, hidden.shape[0], chunk_size):
            end = start + chunk_size
            logits = _logits(hidden[start:end], weight, bias, batch_invariant)
            _row_stats(logits, labels[start:end], temperature, (compute_entropy, compute_sum_pi_squared),
                       (lse[start:end], logprobs[start:end], entropy[start:end], sum_sq[start:end]))
            if batch_invariant:  # the log-probs the engine records for the tokens it samples: its kernel's
                logprobs[start:end] = label_log_probs(logits, labels[start:end], temperature)
        ctx.save_for_backward(hidden, weight, bias, labels, lse, entropy)
        ctx.temperature, ctx.chunk_size, ctx.compute_entropy = temperature, chunk_size, compute_entropy
        ctx.batch_invariant = batch_invariant
        if not compute_entropy:
            entropy = entropy[:0]
        sum_sq = sum_sq if compute_sum_pi_squared else sum_sq[:0]
        ctx.mark_non_differentiable(sum_sq)
        return logprobs, entropy, sum_sq

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_logprobs, grad_entropy, _grad_sum_pi_squared):
        hidden, weight, bias, labels, lse, entropy = ctx.saved_tensors
        entropy_grad = ctx.compute_entropy and grad_entropy is not None and grad_entropy.numel() > 0
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if bias is not None and ctx.needs_input_grad[2] else None
        grad_logprobs = grad_logprobs.float().contiguous()
        grad_entropy = grad_entropy.float().contiguous() if entropy_grad else grad_logprobs
        for start in range(0, hidden.shape[0], ctx.chunk_size):
            end = start + ctx.chunk_size
            h = hidden[start:end]
            grad_logits = _logits(h, weight, bias, ctx.batch_invariant)  # recomputed, then overwritten with its gradient
            rows, vocab = grad_logits.shape
            _backward_kernel[(rows,)](grad_logits, labels[start:end], lse[start:end], entropy[start:end],
                                      grad_logprobs[start:end], grad_entropy[start:end], vocab, grad_logits.stride(0),
                                      1.0 / ctx.temperature, ENTROPY_GRAD=entropy_grad, BLOCK=BLOCK_V, num_warps=8)
            if grad_hidden is not None:
                grad_hidden[start:end] = (grad_logits @ weight.to(grad_logits.dtype)).to(hidden.dtype)
            if grad_weight is not None:
                grad_weight += (grad_logits.t() @ h.to(grad_logits.dtype)).float()
            if grad_bias is not None:
                grad_bias += grad_logits.float().sum(0)
        grad_weight = grad_weight.to(weight.dtype) if grad_weight is not None else None
        grad_bias = grad_bias.to(bias.dtype) if grad_bias is not None else None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None, None


def fused_token_stats(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, temperature: float,
                      chunk_size: int, compute_entropy: bool, compute_sum_pi_squared: bool = False,
                      bias: torch.Tensor | None = None, batch_invariant: bool = False
                      ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """`logprob.token_stats_from_hidden` through the Triton row kernels: (log-probs, entropy, Σπ²), each (N,).
    `batch_invariant`: the logits and the log-probs by the rollout engine's kernels (the entropy and Σπ², which
    the engine does not compute, and the gradients by this file's)."""
    logprobs, entropy, sum_sq = FusedLinearLogprob.apply(hidden, weight, bias, labels.contiguous(), temperature,
                                                         chunk_size, compute_entropy, compute_sum_pi_squared,
                                                         batch_invariant)
    return logprobs, (entropy if compute_entropy else None), (sum_sq if compute_sum_pi_squared else None)
