"""Plain policy-gradient losses on log π_θ (no ratio clipping): GPG, DRO and the REINFORCE form of bypass
mode (verl core_algos `gpg`, `dro`, `compute_policy_loss_reinforce`). Conventions as in ppo_losses.py."""

from __future__ import annotations

import torch

from hybridrl.algorithms.aggregate import agg_loss
from hybridrl.algorithms.loss_settings import ActorLossSettings
from hybridrl.algorithms.masked import masked_mean
from hybridrl.algorithms.ppo_losses import Metrics


def compute_policy_loss_gpg(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                            response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                            config: ActorLossSettings | None = None,
                            rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """GPG (Chu et al. 2025, arXiv 2504.02546): loss = −logp·A, no ratio, so old log-probs are unused and
    no metric is reported (as verl)."""
    pg_losses = -log_prob * advantages
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    scale = (config or ActorLossSettings()).loss_scale_factor
    return agg_loss(pg_losses, response_mask, loss_agg_mode, scale), {}


def compute_policy_loss_dro(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                            response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                            config: ActorLossSettings | None = None,
                            rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """Direct Reward Optimization (Richemond et al. 2024, arXiv 2405.19107) as verl HEAD's `dro`:
    loss = −(logp·A − β/2·(logp − old)²) with β = `policy_loss.dro_beta` (> 0, required)."""
    config = config or ActorLossSettings()
    beta = config.policy_loss.dro_beta
    if beta is None or beta <= 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.dro_beta={beta} must be a positive number with "
                         "loss_mode=dro (the weight of the quadratic log-ratio penalty), e.g. 0.1")
    log_ratio = log_prob - old_log_prob
    pg_losses = -(log_prob * advantages - 0.5 * beta * log_ratio.square())
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, config.loss_scale_factor)
    return pg_loss, {"actor/ppo_kl": masked_mean(-log_ratio, response_mask).detach()}


def compute_policy_loss_reinforce(rollout_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                  response_mask: torch.Tensor, loss_agg_mode: str = "seq-mean-token-sum",
                                  config: ActorLossSettings | None = None,
                                  rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """REINFORCE with optional IS correction: loss = −A·logp·w, w = sg(π_θ/π_rollout) truncated (or 1).
    actor/ppo_kl = E[log π_rollout − log π_θ]. Not a loss_mode of its own: bypass mode's `reinforce`."""
    pg_losses = -advantages * log_prob
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    scale = (config or ActorLossSettings()).loss_scale_factor
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, scale)
    return pg_loss, {"actor/ppo_kl": masked_mean(rollout_log_prob - log_prob, response_mask).detach()}
