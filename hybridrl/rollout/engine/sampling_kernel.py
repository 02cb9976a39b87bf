"""Fused Triton sampler for the RL default (no top-k, no top-p): one pass over each row's logits.

`sampler.sample` on a (512, 151936) batch runs a dozen full-vocabulary passes (fp32 copy, scale, noise
hash, argmax, log-softmax, gather): ~1.5 GB of traffic per decode step. This kernel reads each row
once: z = logits / T, a running log-sum-exp of z and a running arg-max of z + Gumbel noise, where the
noise is the same counter-based hash as `sampler.gumbel_noise` (uint32 arithmetic wraps exactly like
the int64 `& 0xFFFFFFFF` there), so it picks the same tokens as the torch path up to float rounding
(it multiplies by 1 / T where the torch path divides by T). Greedy: arg-max of the logits, log-prob at temperature 1 (as `sample`).
Temperature and greedy are read from tensors, so a CUDA graph that contains this kernel serves every
setting without re-capture: one value for the batch, or one per row (requests with their own settings).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hybridrl.rollout.engine.sampler import MUL_A, MUL_B, MUL_C

# Tuning (benchmarks/sampler_bench.py --sweep, H200, 151,936 bf16 logits): 512 / 16 / 4 was the fastest of 48
# settings at 256 and 512 rows (134 and 258 us; 1024 / 16 / 4 took 142 and 272). The loop is bound by
# instruction issue (the noise hash and two accurate logs per logit), not by memory (9% of DRAM bandwidth).
BLOCK_V = 512
SPLITS = 16  # vocabulary slices per row (power of two)
NUM_WARPS = 4
# Kernels may only read module globals that are constexpr.
_MUL_A, _MUL_B = tl.constexpr(MUL_A), tl.constexpr(MUL_B)
_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _mix32(x):
    x = x ^ (x >> 16)
    x = x * _MUL_A
    x = x ^ (x >> 15)
    x = x * _MUL_B
    return x ^ (x >> 16)


@triton.jit
def _online_sum_exp(run_max, run_sum, z):
    """One lane step of a running (max, sum of exp(x - max)): ONE exp per element, not two. The larger of
    (z, run_max) contributes exp(0) = 1, so only exp(-|z - run_max|) is needed; -inf entries add nothing."""
    grow = z > run_max
    e = tl.exp2(-tl.abs(z - run_max) * _LOG2E)
    e = tl.where(z == float("-inf"), 0.0, e)  # also -inf - -inf (NaN) while the lane has seen nothing
    return tl.maximum(run_max, z), tl.where(grow, run_sum * e + 1.0, run_sum + e)


@triton.jit
def _gumbel(row_hash, ids):
    """Gumbel(0, 1) noise -ln(-ln u) of `sampler.gumbel_noise`. Both logs compile to accurate polynomial
    routines, ~40 of the loop's ~95 instructions per logit; the hardware's approximate log2 would be
    cheaper but is too coarse near u = 1, where the largest noise comes from (benchmarks/README.md)."""
    u = _mix32(row_hash ^ ids.to(tl.uint32))
    u = ((u >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
    return -tl.log(-tl.log(u))


@triton.jit
def _partial_kernel(logits_ptr, keys_ptr, steps_ptr, temp_ptr, greedy_ptr, part_ptr, vocab, split_len, stride_row,
                    setting_stride, BLOCK: tl.constexpr, SPLITS: tl.constexpr, MUL_C_: tl.constexpr):
    """One (row, vocabulary slice): its max and sum of exp (log-sum-exp parts) and its best noisy score.
    setting_stride: 0 (one temperature / greedy flag for all rows) or 1 (one per row)."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    greedy = tl.load(greedy_ptr + row * setting_stride) != 0
    inv_temperature = tl.where(greedy, 1.0, 1.0 / tl.load(temp_ptr + row * setting_stride).to(tl.float32))
    key = tl.load(keys_ptr + row).to(tl.uint32)
    step = tl.load(steps_ptr + row).to(tl.uint32)
    row_hash = _mix32(key ^ _mix32(step * MUL_C_ + 0x9E3779B9))
    offs = tl.arange(0, BLOCK)
    run_max = tl.full([BLOCK], float("-inf"), tl.float32)  # per lane: max of z, for the log-sum-exp
    run_sum = tl.zeros([BLOCK], tl.float32)
    best_score = tl.full([BLOCK], float("-inf"), tl.float32)
    # a lane that only saw -inf scores keeps no id (vocab) and no z, so it cannot lend token 0 a z of 0
    best_id = tl.full([BLOCK], vocab, tl.int32)
    best_z = tl.full([BLOCK], float("-inf"), tl.float32)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, vocab)
    for start in range(lo, hi, BLOCK):
        ids = start + offs
        mask = ids < hi
        z = tl.load(logits_ptr + row * stride_row + ids, mask=mask, other=float("-inf")).to(tl.float32)
        z = z * inv_temperature
        run_max, run_sum = _online_sum_exp(run_max, run_sum, z)
        score = tl.where(greedy, z, z + _gumbel(row_hash, ids))
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
                 logprobs: torch.Tensor | None = None, *, block_v: int = BLOCK_V, max_splits: int = SPLITS,
                 num_warps: int = NUM_WARPS) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (B, V) float/bf16 -> (tokens int64 (B,), log-probs float32 (B,)), like `sampler.sample`
    with top_k off and top_p 1. temperature: float32, greedy: int32 (0 or 1) device tensors, both (1,)
    (one setting for the batch) or both (B,) (one per row).
    `tokens` / `logprobs`: optional output buffers (CUDA-graph static outputs).
    `block_v` (logits per lane group per loop step), `max_splits` (vocabulary slices per row, a power of
    two), `num_warps`: tuning knobs (benchmarks/sampler_bench.py --sweep).

    Two kernels: (row, vocabulary slice) partials, then one combine per row; slicing the vocabulary
    gives the GPU B x SPLITS programs instead of B long serial loops.
    """
    rows, vocab = logits.shape
    if logits.stride(-1) != 1:
        raise ValueError("fused_sample needs logits contiguous in the vocabulary dimension")
    if vocab >= 1 << 24:
        raise ValueError(f"fused_sample carries token ids in float32; vocab {vocab} must be < 2**24")
    per_row = temperature.numel() != 1 or greedy.numel() != 1
    if per_row and not temperature.numel() == greedy.numel() == rows:
        raise ValueError(f"fused_sample: temperature ({temperature.numel()}) and greedy ({greedy.numel()}) "
                         f"need 1 entry or one per row ({rows})")
    device = logits.device
    tokens = tokens if tokens is not None else torch.empty(rows, dtype=torch.int64, device=device)
    logprobs = logprobs if logprobs is not None else torch.empty(rows, dtype=torch.float32, device=device)
    if not rows:
        return tokens, logprobs
    splits = min(max_splits, triton.next_power_of_2(triton.cdiv(vocab, block_v)))
    split_len = triton.cdiv(triton.cdiv(vocab, splits), block_v) * block_v
    parts = torch.empty(rows, splits, 5, dtype=torch.float32, device=device)
    _partial_kernel[(rows, splits)](logits, keys, steps, temperature, greedy, parts, vocab, split_len,
                                    logits.stride(0), int(per_row), BLOCK=block_v, SPLITS=splits, MUL_C_=MUL_C, num_warps=num_warps)
    _combine_kernel[(rows,)](parts, tokens, logprobs, vocab, SPLITS=splits, num_warps=1)
    return tokens, logprobs
