"""`agg_loss`: reduce a `(B, T)` loss matrix to a scalar, verl HEAD semantics with dp_size=1 and the
local (micro-batch) token and sequence counts (verl/trainer/ppo/core_algos.py)."""

from __future__ import annotations

import torch

from hybridrl.algorithms.masked import MEAN_EPSILON, masked_sum

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str,
             loss_scale_factor: float | None = None) -> torch.Tensor:
    """Aggregate `loss_mat (B, T)` over `loss_mask (B, T)` into a scalar.

    token-mean:              Σ loss·m / Σ m
    seq-mean-token-sum:      mean over non-empty rows of Σ_t loss·m
    seq-mean-token-mean:     mean over non-empty rows of Σ_t loss·m / (Σ_t m + 1e-8)
    seq-mean-token-sum-norm: Σ loss·m / loss_scale_factor (default T, the padded length; Dr.GRPO)
    verl v0.4.1 differed: token-mean used masked_mean (+1e-8), the seq modes averaged over all B rows
    (fully masked ones included) and seq-mean-token-mean had no +1e-8.
    Deliberate deviation: an all-masked input gives 0 where verl HEAD gives 0/0 = NaN.
    """
    if loss_agg_mode == "token-mean":
        return _safe_divide(masked_sum(loss_mat, loss_mask), loss_mask.sum())
    if loss_agg_mode == "seq-mean-token-sum-norm":
        scale = loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
        return torch.sum(loss_mat * loss_mask) / scale
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        tokens_per_seq = loss_mask.sum(dim=-1)  # (B,)
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)  # (B,) token-sum
        if loss_agg_mode == "seq-mean-token-mean":
            seq_losses = seq_losses / (tokens_per_seq + MEAN_EPSILON)
        seq_mask = (tokens_per_seq > 0).to(seq_losses.dtype)  # fully masked rows do not count
        return _safe_divide(masked_sum(seq_losses, seq_mask), seq_mask.sum())
    raise ValueError(f"loss_agg_mode={loss_agg_mode!r} is not supported; choose one of {list(LOSS_AGG_MODES)}")


def _safe_divide(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """total / count; when count is 0 the total is 0 too, so divide by 1 instead (no host sync)."""
    return total / torch.where(count > 0, count, torch.ones_like(count))


# --------------------------------------------------------------------- loss_agg_scope=mini_batch
LOSS_AGG_SCOPES = ("mini_batch", "micro_batch")


def mini_batch_counts(response_mask: torch.Tensor) -> torch.Tensor:
    """float64 (2,): [valid tokens, sequences with at least one valid token] of a mask (B, T): what the
    mini-batch means divide by, summed over the ranks that share the mini-batch."""
    tokens_per_seq = response_mask.sum(dim=-1)
    return torch.stack([tokens_per_seq.sum(), (tokens_per_seq > 0).sum()]).to(torch.float64)


def micro_weight(loss_agg_mode: str, micro_mask: torch.Tensor, counts: torch.Tensor, ranks: int = 1) -> torch.Tensor:
    """What a micro-batch's `agg_loss` is multiplied by so that the micro-batches' weighted losses add up
    to `agg_loss` of the whole mini-batch (`counts` = `mini_batch_counts` of it, summed over `ranks` ranks
    whose gradients are averaged; the x ranks undoes that average).

    token-mean: its share of the tokens; the seq-mean modes: its share of the sequences;
    seq-mean-token-sum-norm (a token sum / scale per micro-batch): 1 / sequences, i.e. the mean over sequences
    of token-sum / scale (Dr.GRPO). The result does not depend on how rows fall into micro-batches or ranks.
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode={loss_agg_mode!r} is not supported; choose one of {list(LOSS_AGG_MODES)}")
    local = mini_batch_counts(micro_mask)
    if loss_agg_mode == "token-mean":
        share, total = local[0], counts[0]
    elif loss_agg_mode == "seq-mean-token-sum-norm":
        share, total = torch.ones_like(local[1]), counts[1]
    else:
        share, total = local[1], counts[1]
    return (share * ranks / torch.clamp(total, min=1)).to(torch.float32)
