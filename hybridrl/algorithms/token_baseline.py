"""The optimal token baseline (OTB; https://yingru.notion.site/The-Optimal-Token-Baseline) with verl's
numerics: a baseline per prompt group and per timestep that minimises the policy-gradient variance,

    B_t = Σ_i G_{i,t}·W_{i,t} / (Σ_i W_{i,t} + ε),   W_{i,t} = Σ_{j≤t} (1 − 2π_{i,j} + Σ_v π_{i,j}(v)²)·ρ̄²_{i,j},

where G is the reward-to-go, π_{i,j} = exp(old_log_prob) the sampled token's probability, Σπ² the
`sum_pi_squared` of the actor's forward (the squared norm of the next-token distribution) and ρ̄ the
rollout IS weights when given. A_t = G_t − B_t. A prompt with one response gets B = 0 (A = G). With
`handle_zero_tail`, the single longest trajectory of a group gets B = 0 past the second-longest one's
length (nothing to compare it with there). verl `optimal_token_baseline`, `tir_optimal_token_baseline`.
"""

from __future__ import annotations

import torch

from hybridrl.algorithms.advantages import GroupIndex
from hybridrl.algorithms.grouping import group_ids_from_index


def _reward_to_go(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    return (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])


def _cumulative_variance_proxy(response_mask: torch.Tensor, old_log_probs: torch.Tensor, sum_pi_squared: torch.Tensor,
                               rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    """W `(B, T)`: the running sum over valid tokens of 1 − 2π_t + Σπ² (× ρ̄² with IS weights)."""
    per_token = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared
    if rollout_is_weights is not None:
        per_token = per_token * rollout_is_weights**2
    return (per_token * response_mask).cumsum(dim=-1)


def _group_baselines(returns: torch.Tensor, weights: torch.Tensor, group_ids: torch.Tensor,
                     epsilon: float) -> torch.Tensor:
    """Σ_i G·W / (Σ_i W + ε) per group and column, broadcast to rows `(B, T)`; 0 for groups of one.
    Both inputs are already 0 where a row has no token."""
    num_groups = int(group_ids.max().item()) + 1
    numerator = returns.new_zeros(num_groups, returns.shape[1]).index_add_(0, group_ids, returns * weights)
    denominator = returns.new_zeros(num_groups, returns.shape[1]).index_add_(0, group_ids, weights) + epsilon
    counts = torch.bincount(group_ids, minlength=num_groups)
    baselines = (numerator / denominator)[group_ids]
    return torch.where((counts[group_ids] > 1).unsqueeze(-1), baselines, torch.zeros_like(baselines))


def _zero_tails(baselines: torch.Tensor, lengths: torch.Tensor, group_ids: torch.Tensor) -> None:
    """In place: the unique longest row of each group (of two or more) gets B = 0 from the second-longest
    row's length on (columns counted in the layout `baselines` uses)."""
    for group in torch.unique(group_ids).tolist():
        rows = torch.nonzero(group_ids == group, as_tuple=True)[0]
        if rows.numel() < 2:
            continue
        sorted_lengths = torch.sort(lengths[rows]).values
        longest, second = int(sorted_lengths[-1].item()), int(sorted_lengths[-2].item())
        is_longest = lengths[rows] == longest
        if int(is_longest.sum().item()) == 1 and longest > second:
            baselines[rows[is_longest], second:] = 0.0


@torch.no_grad()
def compute_optimal_token_baseline_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                             index: GroupIndex, old_log_probs: torch.Tensor,
                                             sum_pi_squared: torch.Tensor,
                                             rollout_is_weights: torch.Tensor | None = None,
                                             handle_zero_tail: bool = True, epsilon: float = 1e-8
                                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB over absolute response positions; all inputs `(B, T)`. Returns (advantages, reward-to-go)."""
    returns = _reward_to_go(token_level_rewards, response_mask)
    weights = _cumulative_variance_proxy(response_mask, old_log_probs, sum_pi_squared, rollout_is_weights)
    group_ids = group_ids_from_index(index, returns.shape[0], returns.device)
    baselines = _group_baselines(returns * response_mask, weights * response_mask, group_ids, epsilon)
    if handle_zero_tail:
        _zero_tails(baselines, response_mask.sum(dim=-1), group_ids)
    return (returns - baselines) * response_mask, returns


@torch.no_grad()
def compute_multi_turn_optimal_token_baseline_advantage(
        token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: GroupIndex,
        old_log_probs: torch.Tensor, sum_pi_squared: torch.Tensor, rollout_is_weights: torch.Tensor | None = None,
        handle_zero_tail: bool = True, epsilon: float = 1e-8) -> tuple[torch.Tensor, torch.Tensor]:
    """`tir_optimal_token_baseline`: OTB for multi-turn (tool-integrated) responses, where observation
    tokens (mask 0) sit between the model's: timestep t is a row's t-th *valid* token, so the baseline
    compares the trajectories' t-th generated tokens. Rows without a valid token join no group."""
    returns = _reward_to_go(token_level_rewards, response_mask)
    weights = _cumulative_variance_proxy(response_mask, old_log_probs, sum_pi_squared, rollout_is_weights)
    valid = response_mask.bool()
    lengths = valid.sum(dim=-1)
    width = int(lengths.max().item()) if lengths.numel() else 0
    rows, columns = torch.nonzero(valid, as_tuple=True)
    compact_columns = (valid.cumsum(dim=-1) - 1)[rows, columns]  # position among the row's valid tokens
    compact_returns = returns.new_zeros(returns.shape[0], width)
    compact_weights = torch.zeros_like(compact_returns)
    compact_returns[rows, compact_columns] = returns[rows, columns]
    compact_weights[rows, compact_columns] = weights[rows, columns].to(compact_weights.dtype)
    group_ids = _grouped_without_empty(group_ids_from_index(index, returns.shape[0], returns.device), lengths)
    baselines = _group_baselines(compact_returns, compact_weights, group_ids, epsilon)
    if handle_zero_tail:
        _zero_tails(baselines, lengths, group_ids)
    advantages = torch.zeros_like(returns)
    advantages[rows, columns] = (compact_returns - baselines)[rows, compact_columns]
    return advantages * response_mask, returns


def _grouped_without_empty(group_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Group ids with each row that has no valid token moved into a group of its own (verl leaves such rows
    out of the groups; alone, they neither count toward nor receive a baseline)."""
    solo_ids = group_ids.max() + 1 + torch.arange(group_ids.numel(), device=group_ids.device)
    return torch.where(lengths > 0, group_ids, solo_ids)
