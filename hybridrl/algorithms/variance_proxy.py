"""Gradient-variance proxies from forward statistics only (the optimal token baseline's logit-gradient proxy,
https://www.arxiv.org/abs/2602.07078; verl's `compute_variance_proxy_metrics`, metric names `variance_proxy/*`).

For a trajectory τ the policy gradient ĝ(τ) = ∇log π(τ)·A(τ) has ||ĝ(τ)||² ≈ W(τ)·A(τ)², where
W(τ) = Σ_t (1 − 2π_t + Σ_v π_t(v)²) is the squared norm of Σ_t ∇_logits log π_t summed over the tokens. With Ā the
trajectory's mean advantage over its tokens and N trajectories:

    proxy1 (signal, ||E ĝ||²)      = the measured gradient norm², when given
    proxy2 (total power, E||ĝ||²)  = mean over τ of Ā² · max(W, 0)   (× ρ̄² with rollout IS weights ρ̄)
    proxy3 (noise, Var of the mean) = max(0, (proxy2 − proxy1) / (N − 1))

With IS weights, W is taken per token × ρ̄² for `expected_w`, and proxy2 uses the trajectory's mean ρ̄ squared
times the unweighted W (verl's definitions, kept so dashboards compare).
"""

from __future__ import annotations

import torch

from hybridrl.algorithms.masked import masked_mean, masked_sum


def _signal_and_noise(total_power: torch.Tensor, gradient_norm: float | None, num_rows: int) -> tuple[float, float]:
    if gradient_norm is None:
        return 0.0, 0.0
    signal = gradient_norm**2
    noise = max(0.0, (total_power.item() - signal) / (num_rows - 1)) if num_rows > 1 else 0.0
    return signal, noise


@torch.no_grad()
def compute_variance_proxy_metrics(advantages: torch.Tensor, response_mask: torch.Tensor,
                                   old_log_probs: torch.Tensor, sum_pi_squared: torch.Tensor,
                                   rollout_is_weights: torch.Tensor | None = None,
                                   gradient_norm: float | None = None) -> dict[str, float]:
    """`variance_proxy/*` of one step; tensors `(B, T)`, `gradient_norm` the actor's (its mean over mini-batches)."""
    per_token = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared  # (B, T)
    mean_advantage = masked_mean(advantages, response_mask, axis=-1)  # Ā (B,)
    if rollout_is_weights is None:
        weights = masked_sum(per_token, response_mask, axis=-1)  # W (B,)
        total_power = (mean_advantage**2 * weights.clamp(min=0.0)).mean()
    else:
        squared = rollout_is_weights**2
        weights = masked_sum(per_token * squared, response_mask, axis=-1)
        # verl divides the weighted terms back (a token with ρ̄ = 0 stays out of the unweighted W)
        unweighted = masked_sum(per_token * squared / squared.clamp(min=1e-10), response_mask, axis=-1).clamp(min=0.0)
        mean_is_weight = masked_mean(rollout_is_weights, response_mask, axis=-1)
        total_power = (mean_is_weight**2 * mean_advantage**2 * unweighted).mean()
    signal, noise = _signal_and_noise(total_power, gradient_norm, advantages.shape[0])
    return {
        "variance_proxy/proxy1_signal_strength": signal,
        "variance_proxy/proxy2_total_power": total_power.item(),
        "variance_proxy/proxy3_pure_noise": noise,
        "variance_proxy/expected_a_squared": (mean_advantage**2).mean().item(),
        "variance_proxy/expected_w": weights.mean().item(),
    }
