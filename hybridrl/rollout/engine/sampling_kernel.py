"""Fused Triton sampler for the RL default (no top-k, no top-p): one pass over each row's logits.

`sampler.sample` on a (512, 151936) batch runs a dozen full-vocabulary passes (fp32 copy, scale, noise
hash, argmax, log-softmax, gather): ~1.5 GB of traffic per decode step. This kernel reads each row
once: z = logits / T, a running log-sum-exp of z and a running arg-max of z + Gumbel noise, where the
noise is the same counter-based hash as `sampler.gumbel_noise` (uint32 arithmetic wraps exactly like
the int64 `& 0xFFFFFFFF` there), so it picks the same tokens as the torch path up to float rounding
(it multiplies by 1 / T where the torch path divides by T). Greedy: arg-max of the logits, log-prob at temperature 1 (as `sample`).
Temperature and greedy are read from tensors, so a CUDA graph that contains this kernel serves every
setting without re-capture.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hybridrl.rollout.engine.sampler import MUL_A, MUL_B, MUL_C

BLOCK_V = 1024
SPLITS = 16  # vocabulary slices per row (power of two)
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
def _partial_kernel(logits_ptr, keys_ptr, steps_ptr, temp_ptr, greedy_ptr, part_ptr, vocab, split_len, stride_row,
                    BLOCK: tl.constexpr, SPLITS: tl.constexpr, MUL_C_: tl.constexpr):
    """One (row, vocabulary slice): its max and sum of exp (log-sum-exp parts) and its best noisy score."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    greedy = tl.load(greedy_ptr) != 0
    inv_temperature = tl.where(greedy, 1.0, 1.0 / tl.load(temp_ptr).to(tl.float32))
    key = tl.load(keys_ptr + row).to(tl.uint32)
    step = tl.load(steps_ptr + row).to(tl.uint32)
    row_hash = _mix32(key ^ _mix32(step * MUL_C_ + 0x9E3779B9))
    offs = tl.arange(0, BLOCK)
    run_max = tl.full([BLOCK], float("-inf"), tl.float32)  # per lane: max of z, for the log-sum-exp
    run_sum = tl.zeros([BLOCK], tl.float32)
    best_score = tl.full([BLOCK], float("-inf"), tl.float32)
    best_id = tl.zeros([BLOCK], tl.int32)
    best_z = tl.zeros([BLOCK], tl.float32)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, vocab)
    for start in range(lo, hi, BLOCK):
        ids = start + offs
        mask = ids < hi
        z = tl.load(logits_ptr + row * stride_row + ids, mask=mask, other=float("-inf")).to(tl.float32)
        z = z * inv_temperature
        new_max = tl.maximum(run_max, z)
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe_max) + tl.exp(z - safe_max)
        run_max = new_max
        u = _mix32(row_hash ^ ids.to(tl.uint32))
        u = ((u >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
        score = tl.where(greedy, z, z - tl.log(-tl.log(u)))
        score = tl.where(mask, score, float("-inf"))
        better = score > best_score  # strict: the lowest id wins a tie within a lane, as argmax does
        best_score = tl.where(better, score, best_score)
        best_id = tl.where(better, ids, best_id)
        best_z = tl.where(better, z, best_z)
    part_max = tl.max(run_max, axis=0)
    safe = tl.where(part_max == float("-inf"), 0.0, part_max)
    part_sum = tl.sum(run_sum * tl.exp(run_max - safe), axis=0)
    top = tl.max(best_score, axis=0)
    winner = tl.min(tl.where(best_score == top, best_id, vocab), axis=0)  # lowest id among ties
    winner_z = tl.max(tl.where(best_id == winner, best_z, float("-inf")), axis=0)
    out = part_ptr + (row * SPLITS + split) * 5
    tl.store(out, part_max)
    tl.store(out + 1, part_sum)
    tl.store(out + 2, top)
    tl.store(out + 3, winner.to(tl.float32))  # ids < 2**24: exact in float32
    tl.store(out + 4, winner_z)


@triton.jit
def _combine_kernel(part_ptr, tokens_ptr, logprobs_ptr, vocab, SPLITS: tl.constexpr):
    row = tl.program_id(0)
    splits = tl.arange(0, SPLITS)
    base = part_ptr + (row * SPLITS + splits) * 5
    part_max = tl.load(base)
    part_sum = tl.load(base + 1)
    score = tl.load(base + 2)
    winner = tl.load(base + 3)
    winner_z = tl.load(base + 4)
    row_max = tl.max(part_max, axis=0)
    safe = tl.where(part_max == float("-inf"), row_max, part_max)
    lse = row_max + tl.log(tl.sum(part_sum * tl.exp(safe - row_max), axis=0))
    top = tl.max(score, axis=0)
    token = tl.min(tl.where(score == top, winner, vocab), axis=0)  # slices are in id order: lowest id wins
    token_z = tl.max(tl.where(winner == token, winner_z, float("-inf")), axis=0)
    tl.store(tokens_ptr + row, token.to(tl.int64))
    tl.store(logprobs_ptr + row, token_z - lse)


def fused_sample(logits: torch.Tensor, keys: torch.Tensor, steps: torch.Tensor, temperature: torch.Tensor,
                 greedy: torch.Tensor, tokens: torch.Tensor | None = None,
                 logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (B, V) float/bf16 -> (tokens int64 (B,), log-probs float32 (B,)), like `sampler.sample`
    with top_k off and top_p 1. temperature: float32 (1,); greedy: int32 (1,) (0 or 1) device tensors.
    `tokens` / `logprobs`: optional output buffers (CUDA-graph static outputs).

    Two kernels: (row, vocabulary slice) partials, then one combine per row; slicing the vocabulary
    gives the GPU B x SPLITS programs instead of B long serial loops.
    """
    rows, vocab = logits.shape
    if logits.stride(-1) != 1:
        raise ValueError("fused_sample needs logits contiguous in the vocabulary dimension")
    if vocab >= 1 << 24:
        raise ValueError(f"fused_sample carries token ids in float32; vocab {vocab} must be < 2**24")
    device = logits.device
    tokens = tokens if tokens is not None else torch.empty(rows, dtype=torch.int64, device=device)
    logprobs = logprobs if logprobs is not None else torch.empty(rows, dtype=torch.float32, device=device)
    if not rows:
        return tokens, logprobs
    splits = min(SPLITS, triton.next_power_of_2(triton.cdiv(vocab, BLOCK_V)))
    split_len = triton.cdiv(triton.cdiv(vocab, splits), BLOCK_V) * BLOCK_V
    parts = torch.empty(rows, splits, 5, dtype=torch.float32, device=device)
    _partial_kernel[(rows, splits)](logits, keys, steps, temperature, greedy, parts, vocab, split_len,
                                    logits.stride(0), BLOCK=BLOCK_V, SPLITS=splits, MUL_C_=MUL_C, num_warps=4)
    _combine_kernel[(rows,)](parts, tokens, logprobs, vocab, SPLITS=splits, num_warps=1)
    return tokens, logprobs
