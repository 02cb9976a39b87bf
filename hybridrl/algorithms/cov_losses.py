"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning
Language Models", arXiv 2505.22617): entropy collapse is driven by tokens whose log-prob and advantage
covary strongly, so a small fraction of the highest-covariance tokens is restrained (verl core_algos
`clip_cov`, `kl_cov`). Conventions as in ppo_losses.py.

The token covariance is Cov_t = (A_t − mean A)·(logp_t − mean logp), means over the valid tokens of the
micro-batch the loss sees (as in verl, so which tokens are picked depends on the micro-batch). Neither
clamps the log-ratio before exp.
"""

from __future__ import annotations

import torch

from hybridrl.algorithms.aggregate import agg_loss
from hybridrl.algorithms.loss_settings import ActorLossSettings
from hybridrl.algorithms.masked import masked_mean
from hybridrl.algorithms.ppo_losses import Metrics


def _token_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    log_prob = log_prob.detach()
    return (advantages - masked_mean(advantages, response_mask)) * (log_prob - masked_mean(log_prob, response_mask))


def _random_subset(candidates: torch.Tensor, count: int) -> torch.Tensor:
    """Flat indices of `count` of the True entries of `candidates`, drawn with torch's global RNG (as verl)."""
    flat = torch.nonzero(candidates.reshape(-1), as_tuple=True)[0]
    if flat.numel() == 0:
        return flat
    return flat[torch.randperm(flat.numel())[:min(count, flat.numel())].to(flat.device)]


def compute_policy_loss_clip_cov(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                 response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                                 config: ActorLossSettings | None = None,
                                 rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """Clip-Cov: PPO-clip, plus: of the tokens PPO did not clip whose Cov lies in (clip_cov_lb, clip_cov_ub),
    max(1, ⌊clip_cov_ratio·N_valid⌋) drawn at random lose their gradient (their loss × 0).
    pg_clipfrac = share of those tokens; no dual clip, no pg_clipfrac_lower (as verl)."""
    config = config or ActorLossSettings()
    settings = config.policy_loss
    if not settings.clip_cov_ratio > 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.clip_cov_ratio={settings.clip_cov_ratio} must be > 0 "
                         "with loss_mode=clip_cov (the fraction of tokens whose gradient is cut; verl: 0.0002)")
    low, high = config.clip_range()
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    valid = response_mask > 0
    clipped_by_ppo = (pg_losses2 > pg_losses1) & valid
    covariance = _token_covariance(advantages, log_prob, response_mask)
    candidates = (covariance < settings.clip_cov_ub) & (covariance > settings.clip_cov_lb) & valid & ~clipped_by_ppo
    clip_num = max(int(settings.clip_cov_ratio * response_mask.sum().item()), 1)
    keep = torch.ones_like(advantages).reshape(-1)
    keep[_random_subset(candidates, clip_num)] = 0
    keep = keep.reshape(advantages.shape)
    pg_losses = torch.maximum(pg_losses1, pg_losses2) * keep
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, config.loss_scale_factor)
    return pg_loss, {"actor/pg_clipfrac": masked_mean((keep == 0).float(), response_mask).detach(),
                     "actor/ppo_kl": masked_mean(-negative_approx_kl, response_mask).detach()}


def compute_policy_loss_kl_cov(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                               response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                               config: ActorLossSettings | None = None,
                               rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """KL-Cov: loss = −A·r (no clipping); the max(1, ⌊kl_cov_ratio·N_valid⌋) valid tokens with the largest
    Cov get + ppo_kl_coef·|logp − old| added. actor/ppo_kl is the mean |logp − old| (as verl)."""
    config = config or ActorLossSettings()
    settings = config.policy_loss
    if not settings.kl_cov_ratio > 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.kl_cov_ratio={settings.kl_cov_ratio} must be > 0 "
                         "with loss_mode=kl_cov (the fraction of tokens given the KL penalty; verl: 0.0002)")
    negative_approx_kl = log_prob - old_log_prob
    abs_kl = negative_approx_kl.abs()
    ratio = torch.exp(negative_approx_kl)
    pg_losses = -advantages * ratio
    valid_flat = torch.nonzero((response_mask > 0).reshape(-1), as_tuple=True)[0]
    if valid_flat.numel() > 0:
        valid_advantages = advantages.detach().reshape(-1)[valid_flat]  # plain means over valid tokens, as verl
        valid_log_probs = log_prob.detach().reshape(-1)[valid_flat]
        covariance = (valid_advantages - valid_advantages.mean()) * (valid_log_probs - valid_log_probs.mean())
        count = max(1, int(valid_flat.numel() * settings.kl_cov_ratio))
        chosen = valid_flat[torch.topk(covariance, count, largest=True).indices]
        penalized = torch.zeros_like(pg_losses, dtype=torch.bool).reshape(-1)
        penalized[chosen] = True
        penalty = settings.ppo_kl_coef * abs_kl * penalized.reshape(pg_losses.shape)
        pg_losses = pg_losses + penalty
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, config.loss_scale_factor)
    return pg_loss, {"actor/ppo_kl": masked_mean(abs_kl, response_mask).detach()}
