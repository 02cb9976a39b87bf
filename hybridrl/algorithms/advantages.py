"""Advantage estimators with verl's names, signatures and numerics (verl/trainer/ppo/core_algos.py).

All take `(B, T)` tensors and return `(advantages, returns)`, both `(B, T)`, computed without autograd.
Group estimators take `index` (verl's `uid`): a numpy object array, a list, or a tensor of group ids.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from hybridrl.algorithms.grouping import group_ids_from_index, group_mean_std, per_row_group_sum
from hybridrl.algorithms.masked import masked_whiten

GroupIndex = np.ndarray | Sequence[object] | torch.Tensor


@torch.no_grad()
def compute_gae_advantage_return(token_level_rewards: torch.Tensor, values: torch.Tensor,
                                 response_mask: torch.Tensor, gamma: float, lam: float
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (Schulman et al. 2015), reverse scan over time; masked (observation) tokens are skipped.

    δ_t = r_t + γ·V_next − V_t;  A_t = δ_t + γλ·A_next;  V_next/A_next only advance on mask=1 tokens.
    returns = A + V (before whitening); advantages = masked_whiten(A) over the whole batch.
    """
    next_values = torch.zeros_like(values[:, 0])
    last_gae_lam = torch.zeros_like(values[:, 0])
    advantages_reversed = []
    mask = response_mask.to(values.dtype)
    for t in reversed(range(token_level_rewards.shape[-1])):
        delta = token_level_rewards[:, t] + gamma * next_values - values[:, t]
        gae_lam_t = delta + gamma * lam * last_gae_lam
        next_values = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_values
        last_gae_lam = gae_lam_t * mask[:, t] + (1 - mask[:, t]) * last_gae_lam
        advantages_reversed.append(last_gae_lam)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = advantages + values
    return masked_whiten(advantages, response_mask), returns


@torch.no_grad()
def compute_grpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: GroupIndex, epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024): a_i = (s_i − mean_g)/(std_g + ε), std unbiased; Dr.GRPO drops the /std.

    s_i = Σ_t r_{i,t}; a group of one response (rollout.n=1) gets mean 0, std 1, so a_i = s_i/(1 + ε)
    (s_i with Dr.GRPO), as verl. Broadcast over tokens × mask. Also serves verl's `grpo_vectorized`
    (equal at verl HEAD; its January 2026 version floored the variance at ε).
    """
    scores = token_level_rewards.sum(dim=-1)  # (B,)
    group_ids = group_ids_from_index(index, scores.shape[0], scores.device)
    means, stds, _ = group_mean_std(scores, group_ids)
    centered = scores - means
    scalars = centered / (stds + epsilon) if norm_adv_by_std_in_grpo else centered
    advantages = scalars.unsqueeze(-1) * response_mask
    return advantages, advantages


def _rloo_scalars(token_level_rewards: torch.Tensor, index: GroupIndex, singleton_keeps_score: bool) -> torch.Tensor:
    """RLOO (Ahmadian et al. 2024): a_i = s_i·n/(n−1) − mean·n/(n−1) = s_i − mean of the other n−1.  `(B,)`"""
    scores = token_level_rewards.sum(dim=-1)
    group_ids = group_ids_from_index(index, scores.shape[0], scores.device)
    counts = per_row_group_sum(torch.ones_like(scores), group_ids)
    means = per_row_group_sum(scores, group_ids) / counts
    factor = counts / (counts - 1).clamp(min=1)
    leave_one_out = scores * factor - means * factor
    singleton_value = scores if singleton_keeps_score else torch.zeros_like(scores)
    return torch.where(counts > 1, leave_one_out, singleton_value)


@torch.no_grad()
def compute_rloo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: GroupIndex, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """verl `rloo`: leave-one-out baseline; a group of one keeps its raw score s_i. `epsilon` is unused (verl API)."""
    advantages = _rloo_scalars(token_level_rewards, index, singleton_keeps_score=True).unsqueeze(-1) * response_mask
    return advantages, advantages


@torch.no_grad()
def compute_rloo_vectorized_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                              index: GroupIndex, epsilon: float = 1e-6
                                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """verl `rloo_vectorized`: same as `rloo` except that a group of one gets advantage 0 (as verl does)."""
    advantages = _rloo_scalars(token_level_rewards, index, singleton_keeps_score=False).unsqueeze(-1) * response_mask
    return advantages, advantages


@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                  gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025, arXiv 2501.03262): G_t = r_t + γ·G_{t'} over valid tokens only; A = whiten(G)·mask.

    A mask-0 token (padding, or a tool observation inside a multi-turn response) is skipped: its return
    is 0 and the running return passes through it undiscounted, so inserting observation tokens between
    assistant tokens leaves every valid token's return unchanged (verl #7278). returns = G (unwhitened).
    """
    returns = torch.zeros_like(token_level_rewards)
    running_return = torch.zeros_like(token_level_rewards[:, 0])
    mask = response_mask.to(token_level_rewards.dtype)
    for t in reversed(range(token_level_rewards.shape[1])):
        new_running_return = token_level_rewards[:, t] + gamma * running_return
        returns[:, t] = new_running_return * mask[:, t]
        running_return = new_running_return * mask[:, t] + running_return * (1 - mask[:, t])
    advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(token_level_rewards: torch.Tensor,
                                                           response_mask: torch.Tensor, index: GroupIndex,
                                                           epsilon: float = 1e-6
                                                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: a_i = s_i − group mean (0 for a group of one), tiled over T, × mask,
    then whitened over every valid token of the batch and × mask again. `epsilon` is unused (verl API)."""
    scores = token_level_rewards.sum(dim=-1)
    group_ids = group_ids_from_index(index, scores.shape[0], scores.device)
    means, _, _ = group_mean_std(scores, group_ids)
    advantages = (scores - means).unsqueeze(-1).tile([1, token_level_rewards.shape[-1]]) * response_mask
    advantages = masked_whiten(advantages, response_mask) * response_mask
    return advantages, advantages


@torch.no_grad()
def compute_remax_outcome_advantage(token_level_rewards: torch.Tensor, reward_baselines: torch.Tensor,
                                    response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023): returns = reverse cumsum of r·mask; A = returns − b·mask with b `(B,)` the
    reward of the greedy response."""
    returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns
