"""Batched sampling with reproducible per-row noise: Gumbel-max over temperature/top-k/top-p logits.

The Gumbel noise of (row key, position, token id) comes from a counter-based integer hash, so a row's
tokens depend only on its seed key and the absolute position of the token sampled, never on the batch it
shares, on preemption, or on an abort and resume (the resumed request's prompt holds the tokens sampled
before, so its positions continue), and no per-sequence torch.Generator is needed. Log-probs are under logits / temperature (temperature 1 for
greedy), before top-k/top-p truncation, as the trainer recomputes them.
"""

from __future__ import annotations

from typing import Callable

import torch

MASK32 = 0xFFFFFFFF
# Odd multipliers below 2**31: products with 32-bit values stay below 2**63, exact in int64.
MUL_A, MUL_B, MUL_C = 0x7FEB352D, 0x2C1B3C6D, 0x297A2D39
# Rows per sampling chunk: at most this many logits (~0.5 GiB in float32). The top-k/top-p path holds
# several float32 copies of its rows' logits (sorted, softmax, cumsum, noise), so one pass over 6,000
# rows of a 152k vocabulary took ~40 GB; rows sample independently, so chunks give the same tokens.
SAMPLE_CHUNK_ELEMENTS = 1 << 27


def mix32(x):
    """A 32-bit integer finaliser (xorshift-multiply) on ints or int64 tensors with values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = (x * MUL_A) & MASK32
    x = x ^ (x >> 15)
    x = (x * MUL_B) & MASK32
    return x ^ (x >> 16)


def row_key(seed: int, row: int) -> int:
    """The 32-bit noise key of output row `row` under `seed` (host side, once per sequence)."""
    return mix32(mix32(((seed * MUL_C) & MASK32) ^ mix32(row & MASK32)) ^ ((seed >> 32) & MASK32))


def gumbel_noise(keys: torch.Tensor, steps: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise, float32 (B, K): keys, steps int64 (B,), token_ids int64 (B, K) or (K,)."""
    h = mix32(keys ^ mix32((steps * MUL_C + 0x9E3779B9) & MASK32))[:, None]  # (B, 1)
    u = mix32(h ^ token_ids)  # (B, K) in [0, 2**32)
    u = ((u >> 8).float() + 0.5) * (1.0 / (1 << 24))  # 24 bits: exact in float32, in (0, 1)
    return -torch.log(-torch.log(u))


def gumbel_argmax(cand_logits: torch.Tensor, keys: torch.Tensor, steps: torch.Tensor,
                  cand_ids: torch.Tensor) -> torch.Tensor:
    """Index (B,) of the max of logits + Gumbel noise; the hot loop worth `torch.compile` on GPU."""
    return (cand_logits + gumbel_noise(keys, steps, cand_ids)).argmax(-1)


def apply_top_p(sorted_logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask (-inf) descending-sorted logits outside the smallest prefix whose probability reaches top_p."""
    probs = sorted_logits.softmax(-1)
    exclusive_cumsum = probs.cumsum(-1) - probs
    return sorted_logits.masked_fill(exclusive_cumsum >= top_p, float("-inf"))


def sample(logits: torch.Tensor, temperature: float | torch.Tensor, top_k: int, top_p: float,
           greedy: bool | torch.Tensor, keys: torch.Tensor, steps: torch.Tensor, argmax_fn: Callable = gumbel_argmax
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (B, V) -> (token ids int64 (B,), log-probs float32 (B,)), in row chunks of at most
    SAMPLE_CHUNK_ELEMENTS logits.

    temperature, greedy: one setting for every row (float, bool) or one per row (float32 (B,), bool (B,)
    tensors: a batch of requests with their own settings). keys: per-row noise keys (int64 (B,), from
    `row_key`); steps: the absolute position of the token each row samples (int64 (B,)).
    argmax_fn: `gumbel_argmax` or a compiled version of it.
    """
    rows = max(1, SAMPLE_CHUNK_ELEMENTS // max(logits.shape[-1], 1))
    if logits.shape[0] <= rows:
        return _sample_rows(logits, temperature, top_k, top_p, greedy, keys, steps, argmax_fn)
    parts = [_sample_rows(logits[i:i + rows], _chunk(temperature, i, rows), top_k, top_p, _chunk(greedy, i, rows),
                          keys[i:i + rows], steps[i:i + rows], argmax_fn) for i in range(0, logits.shape[0], rows)]
    return torch.cat([tokens for tokens, _ in parts]), torch.cat([logprobs for _, logprobs in parts])


def _chunk(setting, start: int, rows: int):
    return setting[start:start + rows] if isinstance(setting, torch.Tensor) else setting


def _sample_rows(logits: torch.Tensor, temperature: float | torch.Tensor, top_k: int, top_p: float,
                 greedy: bool | torch.Tensor, keys: torch.Tensor, steps: torch.Tensor, argmax_fn: Callable
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.float()
    if isinstance(greedy, torch.Tensor):  # per-row settings: greedy rows at temperature 1, arg-max
        logits = logits / torch.where(greedy, 1.0, temperature)[:, None]
        sampled = _gumbel_pick(logits, top_k, top_p, keys, steps, argmax_fn)
        tokens = torch.where(greedy, logits.argmax(-1), sampled)
        return tokens, logits.log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
    if greedy:
        tokens = logits.argmax(-1)
        return tokens, logits.log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
    logits = logits / temperature
    tokens = _gumbel_pick(logits, top_k, top_p, keys, steps, argmax_fn)
    return tokens, logits.log_softmax(-1).gather(-1, tokens[:, None])[:, 0]


def _gumbel_pick(logits: torch.Tensor, top_k: int, top_p: float, keys: torch.Tensor, steps: torch.Tensor,
                 argmax_fn: Callable) -> torch.Tensor:
    """Gumbel-max over the top-k / top-p candidates of temperature-scaled logits (B, V) -> token ids (B,)."""
    vocab = logits.shape[-1]
    if 0 < top_k < vocab or top_p < 1.0:
        k = top_k if 0 < top_k < vocab else vocab
        cand_logits, cand_ids = logits.topk(k, dim=-1)  # (B, k), sorted descending
        if top_p < 1.0:
            cand_logits = apply_top_p(cand_logits, top_p)
    else:
        cand_logits, cand_ids = logits, torch.arange(vocab, device=logits.device)
    choice = argmax_fn(cand_logits, keys, steps, cand_ids)
    return cand_ids[choice] if cand_ids.dim() == 1 else cand_ids.gather(-1, choice[:, None])[:, 0]
