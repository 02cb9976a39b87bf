"""Fused Triton sampler for the RL default (no top-k, no top-p): one pass over each row's logits.

`sampler.sample` on a (512, 151936) batch runs a dozen full-vocabulary passes (fp32 copy, scale, noise
hash, argmax, log-softmax, gather): ~1.5 GB of traffic per decode step. This kernel reads each row
once: z = logits / T, a running log-sum-exp of z and a running arg-max of z + Gumbel noise, where the
noise is the same counter-based hash as `sampler.gumbel_noise` (uint32 arithmetic wraps exactly like
the int64 `& 0xFFFFFFFF` there), so it picks the same tokens as the torch path up to float rounding of
the noise. Greedy: arg-max of the logits, log-prob at temperature 1 (as `sample`).
Temperature and greedy are read from tensors, so a CUDA graph that contains this kernel serves every
setting without re-capture.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hybridrl.rollout.engine.sampler import MUL_A, MUL_B, MUL_C

BLOCK_V = 2048
# Kernels may only read module globals that are constexpr.
_MUL_A, _MUL_B = tl.constexpr(MUL_A), tl.constexpr(MUL_B)


@triton.jit
def _mix32(x):
    x = x ^ (x >> 16)
    x = x * _MUL_A
    x = x ^ (x >> 15)
    x = x * _MUL_B
    return x ^ (x >> 16)


@triton.jit
def _sample_kernel(logits_ptr, keys_ptr, steps_ptr, temp_ptr, greedy_ptr, tokens_ptr, logprobs_ptr,
                   vocab, stride_row, BLOCK: tl.constexpr, MUL_C_: tl.constexpr):
    row = tl.program_id(0)
    greedy = tl.load(greedy_ptr) != 0
    temperature = tl.where(greedy, 1.0, tl.load(temp_ptr).to(tl.float32))
    key = tl.load(keys_ptr + row).to(tl.uint32)
    step = tl.load(steps_ptr + row).to(tl.uint32)
    row_hash = _mix32(key ^ _mix32(step * MUL_C_ + 0x9E3779B9))
    offs = tl.arange(0, BLOCK)
    run_max = tl.full([BLOCK], float("-inf"), tl.float32)  # per lane: max of z, for the log-sum-exp
    run_sum = tl.zeros([BLOCK], tl.float32)
    best_score = tl.full([BLOCK], float("-inf"), tl.float32)
    best_id = tl.zeros([BLOCK], tl.int32)
    best_z = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab, BLOCK):
        ids = start + offs
        mask = ids < vocab
        z = tl.load(logits_ptr + row * stride_row + ids, mask=mask, other=float("-inf")).to(tl.float32) / temperature
        new_max = tl.maximum(run_max, z)
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe_max) + tl.exp(z - safe_max)
        run_max = new_max
        u = _mix32(row_hash ^ ids.to(tl.uint32))
        u = ((u >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
        noise = -tl.log(-tl.log(u))
        score = tl.where(greedy, z, z + noise)
        score = tl.where(mask, score, float("-inf"))
        better = score > best_score  # strict: the lowest id wins a tie within a lane, as argmax does
        best_score = tl.where(better, score, best_score)
        best_id = tl.where(better, ids, best_id)
        best_z = tl.where(better, z, best_z)
    row_max = tl.max(run_max, axis=0)
    lse = row_max + tl.log(tl.sum(run_sum * tl.exp(run_max - row_max), axis=0))
    top = tl.max(best_score, axis=0)
    # lowest id among lanes holding the top score (argmax semantics)
    winner = tl.min(tl.where(best_score == top, best_id, vocab), axis=0)
    winner_z = tl.max(tl.where(best_id == winner, best_z, float("-inf")), axis=0)
    tl.store(tokens_ptr + row, winner.to(tl.int64))
    tl.store(logprobs_ptr + row, winner_z - lse)


def fused_sample(logits: torch.Tensor, keys: torch.Tensor, steps: torch.Tensor, temperature: torch.Tensor,
                 greedy: torch.Tensor, tokens: torch.Tensor | None = None,
                 logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (B, V) float/bf16 -> (tokens int64 (B,), log-probs float32 (B,)), like `sampler.sample`
    with top_k off and top_p 1. temperature: float32 (1,); greedy: int32 (1,) (0 or 1) device tensors.
    `tokens` / `logprobs`: optional output buffers (CUDA-graph static outputs)."""
    rows, vocab = logits.shape
    if logits.stride(-1) != 1:
        raise ValueError("fused_sample needs logits contiguous in the vocabulary dimension")
    tokens = tokens if tokens is not None else torch.empty(rows, dtype=torch.int64, device=logits.device)
    logprobs = logprobs if logprobs is not None else torch.empty(rows, dtype=torch.float32, device=logits.device)
    if rows:
        _sample_kernel[(rows,)](logits, keys, steps, temperature, greedy, tokens, logprobs, vocab, logits.stride(0),
                                BLOCK=BLOCK_V, MUL_C_=MUL_C, num_warps=8)
    return tokens, logprobs
