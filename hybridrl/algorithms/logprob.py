"""Token log-probs, entropies and Σπ² from logits, and a chunked, checkpointed path from hidden states
that never materialises fp32 logits for all rows at once (verl torch_functional)."""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def compute_entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim: logsumexp(l) − Σ softmax(l)·l.  `(..., V)` → `(...)`."""
    probs = F.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(probs * logits, dim=-1)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label].  logits `(..., V)`, labels `(...)` → `(...)`.

    fp32/fp64: gather − logsumexp; lower precision: log_softmax then gather (as verl's v2 path).
    """
    if logits.dtype in (torch.float32, torch.float64):
        label_logits = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
        return label_logits - torch.logsumexp(logits, dim=-1)
    return torch.gather(F.log_softmax(logits, dim=-1), dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)


def sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Σ_v π(v)² of p = softmax(logits) over the last dim, the squared norm of the next-token distribution that
    the optimal token baseline's variance proxy reads: exp(lse(2l) − 2·lse(l)) (verl's
    calculate_sum_pi_squared_from_logits; stable for any logit scale).  `(..., V)` → `(...)`, in (0, 1]."""
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))


@dataclass(frozen=True)
class TokenStats:
    """Per-row statistics of the next-token distribution, each `(N,)` fp32: the label's log-prob, the entropy and
    Σπ² (None where not asked for). Σπ² carries no gradient (it feeds advantages and metrics only)."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None = None
    sum_pi_squared: torch.Tensor | None = None


def _chunk_token_stats(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                       temperature: float, compute_entropy: bool, compute_sum_pi_squared: bool
                       ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """One chunk: logits = (h @ Wᵀ + b) in W's dtype, then fp32 / temperature.  `(C, H)` → three `(C,)`."""
    logits = F.linear(hidden.to(weight.dtype), weight, bias).float() / temperature  # (C, V)
    log_normalizer = torch.logsumexp(logits, dim=-1)
    log_probs = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1) - log_normalizer
    entropy = log_normalizer - torch.sum(F.softmax(logits, dim=-1) * logits, dim=-1) if compute_entropy else None
    sum_pi_squared = None
    if compute_sum_pi_squared:  # the same chunk's logits; 2·lse(l) is 2·log_normalizer
        sum_pi_squared = torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * log_normalizer).detach()
    return log_probs, entropy, sum_pi_squared


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def _fused_available(hidden: torch.Tensor) -> bool:
    return hidden.is_cuda and _triton_installed()


def logprobs_and_entropy_from_hidden(hidden: torch.Tensor, lm_head_weight: torch.Tensor, labels: torch.Tensor,
                                     temperature: float, chunk_size: int = 1024, compute_entropy: bool = True,
                                     lm_head_bias: torch.Tensor | None = None, fused: bool | None = None
                                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs `(N,)` and entropies `(N,)` (or None) from hidden `(N, H)`, lm_head `(V, H)`, labels `(N,)`:
    `token_stats_from_hidden` without Σπ²."""
    stats = token_stats_from_hidden(hidden, lm_head_weight, labels, temperature, chunk_size, compute_entropy,
                                    lm_head_bias=lm_head_bias, fused=fused)
    return stats.log_probs, stats.entropy


def token_stats_from_hidden(hidden: torch.Tensor, lm_head_weight: torch.Tensor, labels: torch.Tensor,
                            temperature: float, chunk_size: int = 1024, compute_entropy: bool = True,
                            compute_sum_pi_squared: bool = False, lm_head_bias: torch.Tensor | None = None,
                            fused: bool | None = None, batch_invariant: bool = False) -> TokenStats:
    """Log-probs, entropies and Σπ² (`TokenStats`, each `(N,)`) from hidden `(N, H)`, lm_head `(V, H)` and
    labels `(N,)`.

    Rows go through in chunks of `chunk_size`, so one chunk's `(C, V)` logits at most are alive at a
    time; entropy and Σπ² come from the same chunk's logits (divided by `temperature`). `fused` (default: on
    CUDA when Triton imports): Triton row kernels over logits kept in the GEMM's dtype (fused_logprob.py);
    else torch ops on fp32 logits, each chunk recomputed in backward (non-reentrant checkpoint).
    `batch_invariant` (`actor_rollout_ref.model.batch_invariant`): the Triton path with the LM head and the
    log-probs by the rollout engine's batch-invariant kernels (on CUDA, or on CPU under TRITON_INTERPRET=1).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 (got {chunk_size})")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to scale logits (got {temperature}); greedy uses 1.0 here")
    if batch_invariant or (fused if fused is not None else _fused_available(hidden)):
        from hybridrl.algorithms.fused_logprob import fused_token_stats

        return TokenStats(*fused_token_stats(hidden, lm_head_weight, labels, temperature, chunk_size,
                                             compute_entropy, compute_sum_pi_squared, lm_head_bias, batch_invariant))
    inputs_need_grad = any(t is not None and t.requires_grad for t in (hidden, lm_head_weight, lm_head_bias))
    use_checkpoint = torch.is_grad_enabled() and inputs_need_grad
    chunks = []
    for start in range(0, hidden.shape[0], chunk_size):
        args = (hidden[start:start + chunk_size], lm_head_weight, lm_head_bias, labels[start:start + chunk_size],
                temperature, compute_entropy, compute_sum_pi_squared)
        chunks.append(checkpoint(_chunk_token_stats, *args, use_reentrant=False) if use_checkpoint
                      else _chunk_token_stats(*args))
    if not chunks:  # N == 0
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return TokenStats(empty, empty.clone() if compute_entropy else None,
                          empty.clone() if compute_sum_pi_squared else None)
    log_probs, entropies, sums = zip(*chunks)
    return TokenStats(torch.cat(log_probs), torch.cat(entropies) if compute_entropy else None,
                      torch.cat(sums) if compute_sum_pi_squared else None)
