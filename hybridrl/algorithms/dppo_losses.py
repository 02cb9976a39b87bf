"""DPPO (arXiv 2602.04879): a divergence trust region instead of ratio clipping (verl HEAD `dppo_tv`,
`dppo_kl`). Signature and conventions as in ppo_losses.py.

Both use the REINFORCE form loss = −A·sg(min(r, C))·logp·valid, with r = exp(clamp(logp − old, ±20)) and
C = `clip_ratio_c` (truncated IS; the paper recommends a large C, verl's fallback is 20 but the actor's
clip_ratio_c, 3.0 by default, is what it reads). `clip_ratio`/`_low`/`_high` are divergence thresholds
δ, not ratio ranges. A token is dropped (valid = 0) when its update leaves the trust region in the
direction the advantage pushes. pg_clipfrac = share of dropped tokens; pg_clipfrac_lower = share of kept
tokens whose ratio was truncated at C.
"""

from __future__ import annotations

import torch

from hybridrl.algorithms.aggregate import agg_loss
from hybridrl.algorithms.loss_settings import ActorLossSettings
from hybridrl.algorithms.masked import masked_mean
from hybridrl.algorithms.ppo_losses import Metrics, clamped_log_ratio, pg_metrics

BINARY_KL_EPSILON = 1e-8  # inside the logs of 1 − p


def _dppo_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
               response_mask: torch.Tensor, loss_agg_mode: str, config: ActorLossSettings,
               rollout_is_weights: torch.Tensor | None, valid_mask: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    negative_approx_kl = clamped_log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(negative_approx_kl)
    truncated_ratio = torch.clamp(ratio, max=config.clip_ratio_c).detach()
    valid = valid_mask.detach().float()
    pg_losses = -advantages * truncated_ratio * log_prob * valid
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, config.loss_scale_factor)
    pg_clipfrac = masked_mean(1.0 - valid, response_mask)
    pg_clipfrac_lower = masked_mean((ratio > config.clip_ratio_c).float() * valid, response_mask)
    return pg_loss, pg_metrics(pg_clipfrac, masked_mean(-negative_approx_kl, response_mask), pg_clipfrac_lower)


def compute_policy_loss_dppo_tv(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                                config: ActorLossSettings | None = None,
                                rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """DPPO-Binary-TV: with p = π_θ(y_t), q = π_old(y_t), keep a token when p − q ≤ δ_high (A > 0) or
    p − q ≥ −δ_low (A ≤ 0)."""
    config = config or ActorLossSettings()
    low, high = config.clip_range()
    prob_change = torch.exp(log_prob) - torch.exp(old_log_prob)
    valid = torch.where(advantages > 0, prob_change <= high, prob_change >= -low)
    return _dppo_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                      rollout_is_weights, valid)


def compute_policy_loss_dppo_kl(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                                config: ActorLossSettings | None = None,
                                rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """DPPO-Binary-KL: the KL between the Bernoulli(q) and Bernoulli(p) of the sampled token,
    KL = q·log(q/p) + (1 − q)·log((1 − q + 1e-8)/(1 − p + 1e-8)); keep a token when KL ≤ δ_high or p ≤ q
    (A > 0), KL ≤ δ_low or p ≥ q (A ≤ 0)."""
    config = config or ActorLossSettings()
    low, high = config.clip_range()
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + BINARY_KL_EPSILON) / (1.0 - prob + BINARY_KL_EPSILON))
    valid = torch.where(advantages > 0, (binary_kl <= high) | (prob <= old_prob),
                        (binary_kl <= low) | (prob >= old_prob))
    return _dppo_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                      rollout_is_weights, valid)
