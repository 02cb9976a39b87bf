"""`agg_loss`: reduce a `(B, T)` loss matrix to a scalar with verl HEAD's semantics
(verl/trainer/ppo/core_algos.py), and the micro-batch weights of `loss_agg_scope=mini_batch`."""

from __future__ import annotations

import torch

from hybridrl.algorithms.masked import MEAN_EPSILON, masked_sum

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str,
             loss_scale_factor: float | None = None, *, dp_size: int = 1,
             batch_num_tokens: torch.Tensor | float | None = None,
             global_batch_size: torch.Tensor | float | None = None) -> torch.Tensor:
    """Aggregate `loss_mat (B, T)` over `loss_mask (B, T)` into a scalar (verl HEAD `agg_loss`).

    token-mean:              Σ loss·m / N_tok · dp_size
    token-sum:               Σ loss·m · dp_size
    seq-mean-token-sum:      Σ_rows (Σ_t loss·m) / N_seq · dp_size
    seq-mean-token-mean:     Σ_rows (Σ_t loss·m / (Σ_t m + 1e-8)) / N_seq · dp_size
    seq-mean-token-sum-norm: seq-mean-token-sum / loss_scale_factor (default T, the padded length; Dr.GRPO)
    N_tok = `batch_num_tokens` and N_seq = `global_batch_size` (sequences with a valid token) default to this
    batch's own counts; verl's engine passes the global ones with `dp_size` > 1 (`**config.global_batch_info`),
    so the keyword spellings are verl's. Fully masked rows count in no seq mode.
    Older verl (<= Jan 2026) meant Σ loss·m / loss_scale_factor by seq-mean-token-sum-norm, without the mean
    over sequences; and v0.4.1's seq modes averaged over all B rows.
    Deliberate deviation: an all-masked input gives 0 where verl HEAD gives 0/0 = NaN.
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode={loss_agg_mode!r} is not supported; choose one of {list(LOSS_AGG_MODES)}")
    _check_global_count(loss_agg_mode, dp_size, batch_num_tokens, global_batch_size)
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode == "token-mean":
        num_tokens = loss_mask.sum() if batch_num_tokens is None else torch.as_tensor(batch_num_tokens)
        return _safe_divide(masked_sum(loss_mat, loss_mask), num_tokens) * dp_size
    tokens_per_seq = loss_mask.sum(dim=-1)  # (B,)
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)  # (B,) token-sum
    if loss_agg_mode == "seq-mean-token-mean":
        seq_losses = seq_losses / (tokens_per_seq + MEAN_EPSILON)
    seq_mask = (tokens_per_seq > 0).to(seq_losses.dtype)  # fully masked rows do not count
    num_seqs = seq_mask.sum() if global_batch_size is None else torch.as_tensor(global_batch_size)
    loss = _safe_divide(masked_sum(seq_losses, seq_mask), num_seqs) * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return loss


def _check_global_count(loss_agg_mode: str, dp_size: int, batch_num_tokens: object, global_batch_size: object) -> None:
    """With dp_size > 1 a mean needs the count over all ranks; a local count would be silently wrong."""
    if dp_size <= 1 or loss_agg_mode == "token-sum":
        return
    name, value = (("batch_num_tokens", batch_num_tokens) if loss_agg_mode == "token-mean"
                   else ("global_batch_size", global_batch_size))
    if value is None:
        raise ValueError(f"agg_loss({loss_agg_mode!r}, dp_size={dp_size}) needs {name}, the count over all "
                         f"{dp_size} ranks; pass it (verl: **config.global_batch_info) or use dp_size=1")


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

    token-mean: its share of the tokens; the seq-mean modes (seq-mean-token-sum-norm too): its share of the
    sequences; token-sum: 1 (a sum over the whole mini-batch is the sum of the micro-batches' sums).
    The result does not depend on how rows fall into micro-batches or ranks.
    """
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode={loss_agg_mode!r} is not supported; choose one of {list(LOSS_AGG_MODES)}")
    local = mini_batch_counts(micro_mask)
    if loss_agg_mode == "token-mean":
        share, total = local[0], counts[0]
    elif loss_agg_mode == "token-sum":
        share, total = torch.ones_like(local[0]), torch.ones_like(counts[0])
    else:
        share, total = local[1], counts[1]
    return (share * ranks / torch.clamp(total, min=1)).to(torch.float32)
