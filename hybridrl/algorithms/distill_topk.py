"""Top-k distillation math from hidden states (verl/trainer/distillation/fsdp/losses.py, chunked).

The teacher's top-k log-probs and ids at each response position, and the student's log-probs at those ids,
are taken from the final hidden states and the LM head chunk by chunk, so no `(N, V)` logits of a whole
batch exist at once: log_softmax(x)[ids] = x[ids] − logsumexp(x) per row. On the student side (which trains)
each chunk's logits are recomputed in the backward (activation checkpointing) instead of being kept.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float) -> torch.Tensor:
    logits = hidden @ weight.t()
    if bias is not None:
        logits = logits + bias
    return logits.float() / temperature


@torch.no_grad()
def topk_log_probs_from_hidden(hidden: torch.Tensor, weight: torch.Tensor, k: int, *, temperature: float = 1.0,
                               bias: torch.Tensor | None = None, chunk_rows: int = 1024, num_ids: int | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs (N, k) fp32, ids (N, k) int64) of the k most likely tokens after each of `hidden` (N, H),
    in descending order, under the head `weight` (V, H); only ids below `num_ids` (when given) are candidates,
    the softmax still over all V (a head padded past the tokenizer: its extra rows are no token)."""
    values, ids = [], []
    for start in range(0, hidden.shape[0], chunk_rows):
        log_probs = torch.log_softmax(_logits(hidden[start:start + chunk_rows], weight, bias, temperature), dim=-1)
        top = torch.topk(log_probs[:, :num_ids], k=k, dim=-1)
        values.append(top.values)
        ids.append(top.indices)
    if not values:
        return hidden.new_zeros((0, k), dtype=torch.float32), torch.zeros((0, k), dtype=torch.long, device=hidden.device)
    return torch.cat(values), torch.cat(ids)


def _gather_chunk(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, ids: torch.Tensor,
                  temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    logits = _logits(hidden, weight, bias, temperature)
    log_z = torch.logsumexp(logits, dim=-1, keepdim=True)
    own_topk = torch.topk(logits.detach(), k=ids.shape[-1], dim=-1).indices  # log_softmax is monotonic
    return logits.gather(-1, ids) - log_z, own_topk


def log_probs_at_ids_from_hidden(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor, *,
                                 temperature: float = 1.0, bias: torch.Tensor | None = None, chunk_rows: int = 1024
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs (N, K) fp32 at `ids` (N, K), differentiable; the model's own top-K ids (N, K)) of the
    next token after each of `hidden` (N, H) under `weight` (V, H), logits divided by `temperature`."""
    gathered, own = [], []
    trains = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    for start in range(0, hidden.shape[0], chunk_rows):
        args = (hidden[start:start + chunk_rows], weight, bias, ids[start:start + chunk_rows], temperature)
        if trains:
            values, top = checkpoint(_gather_chunk, *args, use_reentrant=False)
        else:
            values, top = _gather_chunk(*args)
        gathered.append(values)
        own.append(top)
    if not gathered:
        k = ids.shape[-1]
        return hidden.new_zeros((0, k), dtype=torch.float32), torch.zeros((0, k), dtype=torch.long, device=hidden.device)
    return torch.cat(gathered), torch.cat(own)


def forward_kl_topk(student_log_probs: torch.Tensor, teacher_log_probs: torch.Tensor, teacher_ids: torch.Tensor,
                    student_topk_ids: torch.Tensor, log_prob_min_clamp: float | None = None) -> dict[str, torch.Tensor]:
    """Per-position forward KL over the teacher's top-k, all inputs (..., K):

        loss = Σ_k ν_k (log ν_k − log π_k),  ν_k = exp(log ν_k)

    with `student_log_probs` π at the teacher's ids. Both log-probs floored at `log_prob_min_clamp` first
    (when given); the masses Σ_k π_k and Σ_k ν_k are taken before that floor. Overlap diagnostics
    (arXiv 2604.13016): how many of the teacher's ids are among the student's own top-k, and the mean of
    −ν_k (log ν_k − log π_k) over those ids (0 where none overlap). Outputs (...)."""
    student_mass = student_log_probs.exp().sum(-1)
    teacher_mass = teacher_log_probs.exp().sum(-1)
    if log_prob_min_clamp is not None:
        student_log_probs = student_log_probs.clamp_min(log_prob_min_clamp)
        teacher_log_probs = teacher_log_probs.clamp_min(log_prob_min_clamp)
    teacher_log_probs = teacher_log_probs.float()
    token_kl = teacher_log_probs.exp() * (teacher_log_probs - student_log_probs.float())
    overlap_mask = (teacher_ids.unsqueeze(-1) == student_topk_ids.unsqueeze(-2)).any(-1)
    overlap_count = overlap_mask.sum(-1)
    overlap_advantage = (-token_kl.detach() * overlap_mask).sum(-1) / overlap_count.clamp_min(1)
    return {"distillation_losses": token_kl.sum(-1), "student_mass": student_mass.detach(),
            "teacher_mass": teacher_mass, "overlap_count": overlap_count,
            "overlap_token_advantage": torch.where(overlap_count > 0, overlap_advantage,
                                                   torch.zeros_like(overlap_advantage))}
