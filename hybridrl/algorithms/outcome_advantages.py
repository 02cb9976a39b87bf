"""More group-baseline outcome estimators with verl's numerics (verl/trainer/ppo/core_algos.py): OPO, GPG,
GRPO pass@k and GDPO. Conventions as in advantages.py: `(B, T)` tensors in, `(advantages, returns)` out
(equal here), scores s_i = Σ_t r_{i,t}, groups from `index` (verl's uid).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from hybridrl.algorithms.advantages import GroupIndex, compute_grpo_outcome_advantage
from hybridrl.algorithms.grouping import group_ids_from_index, group_mean_std, per_row_group_sum
from hybridrl.algorithms.masked import masked_whiten


@torch.no_grad()
def compute_opo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                  index: GroupIndex, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO (Hao et al. 2025, arXiv 2505.23585), the optimal baseline for a sequence-level reward:
    b_g = Σ_j |y_j|·s_j / Σ_j |y_j| over the group (length-weighted mean); a_i = s_i − b_g, × mask.
    A group of one (rollout.n=1) has b = 0, so a_i = s_i. `epsilon` is unused (verl API)."""
    scores = token_level_rewards.sum(dim=-1)
    lengths = response_mask.sum(dim=-1).to(scores.dtype)
    group_ids = group_ids_from_index(index, scores.shape[0], scores.device)
    counts = per_row_group_sum(torch.ones_like(scores), group_ids)
    baselines = per_row_group_sum(lengths * scores, group_ids) / per_row_group_sum(lengths, group_ids)
    baselines = torch.where(counts > 1, baselines, torch.zeros_like(baselines))
    advantages = (scores - baselines).unsqueeze(-1) * response_mask
    return advantages, advantages


@torch.no_grad()
def compute_gpg_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                  index: GroupIndex, epsilon: float = 1e-6, f_norm: float = 1.0
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG (Chu et al. 2025, arXiv 2504.02546): a_i = α·(s_i − mean_g)/f_norm with
    α = B / max(#{i: s_i ≠ 0}, 1) over the whole batch (it rescales for groups that carry no signal).
    A group of one has mean 0, so a_i = α·s_i. `epsilon` is unused (verl API)."""
    scores = token_level_rewards.sum(dim=-1)
    alpha = scores.shape[0] / torch.count_nonzero(scores).clamp(min=1)
    group_ids = group_ids_from_index(index, scores.shape[0], scores.device)
    means, _, _ = group_mean_std(scores, group_ids)
    advantages = (alpha * (scores - means) / f_norm).unsqueeze(-1) * response_mask
    return advantages, advantages


@torch.no_grad()
def compute_grpo_passk_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                         index: GroupIndex, epsilon: float = 1e-6,
                                         norm_adv_by_std_in_grpo: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k training (Chen et al. 2025, arXiv 2503.19595): in each group only the best response gets an
    advantage, r_max − r_second (÷ (std_g + ε) with norm_adv_by_std_in_grpo; std unbiased); the rest get 0.
    Ties are broken by torch.topk, as in verl. Every group needs at least 2 responses."""
    scores = token_level_rewards.sum(dim=-1)
    group_ids = group_ids_from_index(index, scores.shape[0], scores.device)
    advantages = torch.zeros_like(scores)
    for group in torch.unique(group_ids).tolist():
        rows = torch.nonzero(group_ids == group, as_tuple=True)[0]  # in batch order, as verl's lists
        rewards = scores[rows]
        if rewards.numel() < 2:
            raise ValueError(f"adv_estimator 'grpo_passk' needs at least 2 responses per prompt, but a group has "
                             f"{rewards.numel()}; set actor_rollout_ref.rollout.n >= 2")
        top, top_index = torch.topk(rewards, 2)
        advantage = top[0] - top[1]
        if norm_adv_by_std_in_grpo:
            advantage = advantage / (torch.std(rewards) + epsilon)
        advantages[rows[top_index[0]]] = advantage
    advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages


@torch.no_grad()
def compute_gdpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index: GroupIndex, epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True,
                                   reward_components: Mapping[str, Sequence[float]] | None = None,
                                   gdpo_reward_keys: Sequence[str] | None = None,
                                   gdpo_reward_weights: Sequence[float] | None = None
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO (arXiv 2601.05242): normalise each reward component within its group before adding them, so a
    dominant component cannot drown the others.

    A_k = GRPO advantage of component k (per-row scores `reward_components[key]`, e.g. the reward function's
    extra info, for each key of `gdpo_reward_keys`); A = Σ_k w_k·A_k (w = `gdpo_reward_weights`, default 1);
    advantages = whiten(A) over the batch's valid tokens, × mask. Without components, the single component
    is `token_level_rewards` (verl's fallback).
    """
    components = _gdpo_components(token_level_rewards, reward_components, gdpo_reward_keys)
    weights = [1.0] * len(components) if gdpo_reward_weights is None else [float(w) for w in gdpo_reward_weights]
    if len(weights) != len(components):
        raise ValueError(f"algorithm.gdpo_reward_weights has {len(weights)} weights for {len(components)} "
                         f"algorithm.gdpo_reward_keys; give one weight per key")
    combined = torch.zeros_like(token_level_rewards, dtype=torch.float32)
    for weight, component in zip(weights, components):
        normalized, _ = compute_grpo_outcome_advantage(component, response_mask, index, epsilon,
                                                       norm_adv_by_std_in_grpo)
        combined = combined + weight * normalized
    advantages = masked_whiten(combined, response_mask) * response_mask
    return advantages, advantages


def _gdpo_components(token_level_rewards: torch.Tensor, reward_components: Mapping[str, Sequence[float]] | None,
                     keys: Sequence[str] | None) -> list[torch.Tensor]:
    """One `(B, 1)` score tensor per key (only the row sum matters to GRPO), or `token_level_rewards`."""
    if reward_components is None:
        return [token_level_rewards]
    if not keys:
        raise ValueError("adv_estimator 'gdpo' needs algorithm.gdpo_reward_keys: the reward components your "
                         "compute_score returns in its dict, e.g. +algorithm.gdpo_reward_keys='[accuracy,format]'")
    missing = [key for key in keys if key not in reward_components]
    if missing:
        raise ValueError(f"algorithm.gdpo_reward_keys {missing} are not among the reward function's extra keys "
                         f"{sorted(reward_components)}; return them in compute_score's dict")
    return [torch.tensor([float(v) for v in reward_components[key]], dtype=torch.float32,
                         device=token_level_rewards.device).unsqueeze(-1) for key in keys]
