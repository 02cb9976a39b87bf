"""Ratio-clipped policy losses (verl/trainer/ppo/core_algos.py): vanilla PPO with dual-clip, GSPO, SAPO,
CISPO and GMPO (`geo_mean`).

Every `compute_policy_loss_<mode>` has verl's signature `(old_log_prob, log_prob, advantages,
response_mask, loss_agg_mode, config, rollout_is_weights) -> (pg_loss, metrics)`: tensors `(B, T)`,
`config` an ActorLossSettings (verl's ActorConfig names), metrics under verl's `actor/` names as 0-d
tensors. `rollout_is_weights (B, T)` multiply the token losses (rollout correction).
"""

from __future__ import annotations

import torch

from hybridrl.algorithms.aggregate import agg_loss
from hybridrl.algorithms.loss_settings import ActorLossSettings
from hybridrl.algorithms.masked import masked_mean

LOG_RATIO_CLAMP = 20.0  # log-ratios clamped to ±20 before exp
GSPO_LOG_RATIO_MAX = 10.0  # GSPO token log-ratio clamped above at 10
Metrics = dict[str, torch.Tensor]


def pg_metrics(clipfrac: torch.Tensor, ppo_kl: torch.Tensor, clipfrac_lower: torch.Tensor) -> Metrics:
    return {"actor/pg_clipfrac": clipfrac.detach(), "actor/ppo_kl": ppo_kl.detach(),
            "actor/pg_clipfrac_lower": clipfrac_lower.detach()}


def clamped_log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    return torch.clamp(log_prob - old_log_prob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)


def _weighted(pg_losses: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    return pg_losses if rollout_is_weights is None else pg_losses * rollout_is_weights


def compute_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                        response_mask: torch.Tensor, cliprange: float | None = None,
                        cliprange_low: float | None = None, cliprange_high: float | None = None,
                        clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean",
                        rollout_is_weights: torch.Tensor | None = None, loss_scale_factor: float | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped PPO (Schulman et al. 2017) with dual-clip for A < 0 (Ye et al. 2019, arXiv 1912.09729).

    r = exp(clamp(logp − old, ±20));  L1 = −A·r;  L2 = −A·clip(r, 1−ε_low, 1+ε_high);  C1 = max(L1, L2);
    L3 = −A·c;  loss = min(L3, C1) where A < 0 else C1;  × rollout_is_weights;  aggregated by agg_loss.
    Returns (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower) as scalars (verl's functional form).
    """
    if not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for dual-clip PPO (got {clip_ratio_c}); the default is 3.0")
    cliprange_low = cliprange if cliprange_low is None else cliprange_low
    cliprange_high = cliprange if cliprange_high is None else cliprange_high
    if cliprange_low is None or cliprange_high is None:
        raise ValueError("compute_policy_loss needs cliprange, or both cliprange_low and cliprange_high")
    negative_approx_kl = clamped_log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), response_mask)
    pg_losses = _weighted(torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1), rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, loss_scale_factor)
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


def compute_policy_loss_vanilla(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                                config: ActorLossSettings | None = None,
                                rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """`loss_mode: vanilla`: PPO + dual-clip (`compute_policy_loss`) with the actor's clip ratios."""
    config = config or ActorLossSettings()
    low, high = config.clip_range()
    pg_loss, *metrics = compute_policy_loss(old_log_prob, log_prob, advantages, response_mask,
                                            cliprange_low=low, cliprange_high=high,
                                            clip_ratio_c=config.clip_ratio_c, loss_agg_mode=loss_agg_mode,
                                            rollout_is_weights=rollout_is_weights,
                                            loss_scale_factor=config.loss_scale_factor)
    return pg_loss, pg_metrics(*metrics)


def compute_policy_loss_gspo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                             response_mask: torch.Tensor, loss_agg_mode: str = "seq-mean-token-mean",
                             config: ActorLossSettings | None = None,
                             rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): sequence-level importance ratio.

    log s_i = Σ_t m·(logp − old) / max(|y_i|, 1) (no ±20 clamp); token ratio
    s_{i,t} = exp(min(logp − sg(logp) + sg(log s_i), 10)), whose value is s_i and whose gradient is that
    of logp; then PPO clip (no dual clip). Always seq-mean-token-mean, whatever `loss_agg_mode` says (as
    verl). pg_clipfrac_lower is 0.
    """
    low, high = (config or ActorLossSettings()).clip_range()
    negative_approx_kl = log_prob - old_log_prob
    seq_lengths = torch.sum(response_mask, dim=-1).clamp(min=1)
    negative_approx_kl_seq = torch.sum(negative_approx_kl * response_mask, dim=-1) / seq_lengths  # (B,)
    log_seq_ratio = log_prob - log_prob.detach() + negative_approx_kl_seq.detach().unsqueeze(-1)
    seq_importance_ratio = torch.exp(torch.clamp(log_seq_ratio, max=GSPO_LOG_RATIO_MAX))
    pg_losses1 = -advantages * seq_importance_ratio
    pg_losses2 = -advantages * torch.clamp(seq_importance_ratio, 1 - low, 1 + high)
    pg_losses = _weighted(torch.maximum(pg_losses1, pg_losses2), rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, "seq-mean-token-mean")
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    return pg_loss, pg_metrics(pg_clipfrac, ppo_kl, torch.zeros((), device=pg_loss.device))


def compute_policy_loss_sapo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                             response_mask: torch.Tensor, loss_agg_mode: str = "seq-mean-token-mean",
                             config: ActorLossSettings | None = None,
                             rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """SAPO (Gao et al. 2025, arXiv 2511.20347): a smooth sigmoid gate instead of a hard clip.

    r = exp(clamp(logp − old, ±20)); τ = tau_pos where A > 0 else tau_neg;
    f(r) = σ(τ·(r − 1))·4/τ (slope 1 at r = 1);  loss = −f(r)·A, always seq-mean-token-mean (as verl).
    No clipping, so both clip fractions are 0.
    """
    config = config or ActorLossSettings()
    tau_pos = torch.as_tensor(config.tau_pos, dtype=advantages.dtype, device=advantages.device)
    tau_neg = torch.as_tensor(config.tau_neg, dtype=advantages.dtype, device=advantages.device)
    negative_approx_kl = clamped_log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(negative_approx_kl)
    taus = torch.where(advantages > 0, tau_pos, tau_neg)
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    pg_losses = _weighted(-gates * advantages, rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, "seq-mean-token-mean")
    zero = torch.zeros((), device=pg_loss.device)
    return pg_loss, pg_metrics(zero, masked_mean(-negative_approx_kl, response_mask), zero)


def compute_policy_loss_cispo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                              response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                              config: ActorLossSettings | None = None,
                              rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """CISPO (MiniMax-M1, arXiv 2506.13585): clip the IS weight, keep every token's gradient.

    r = exp(clamp(logp − old, ±20));  loss = −sg(clip(r, 1−ε_low, 1+ε_high))·A·logp;
    pg_clipfrac = share of tokens whose r was clipped; pg_clipfrac_lower = 0.
    """
    config = config or ActorLossSettings()
    low, high = config.clip_range()
    negative_approx_kl = clamped_log_ratio(log_prob, old_log_prob)
    ratio = torch.exp(negative_approx_kl)
    clipped_ratio = torch.clamp(ratio, 1 - low, 1 + high)
    pg_losses = _weighted(-clipped_ratio.detach() * advantages * log_prob, rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, config.loss_scale_factor)
    pg_clipfrac = masked_mean((ratio != clipped_ratio).float(), response_mask)
    return pg_loss, pg_metrics(pg_clipfrac, masked_mean(-negative_approx_kl, response_mask),
                               torch.zeros((), device=pg_loss.device))


def compute_policy_loss_geo_mean(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                 response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                                 config: ActorLossSettings | None = None,
                                 rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, Metrics]:
    """GMPO (Zhao et al. 2025, arXiv 2507.20673): the geometric mean of token ratios, clipped per token.

    δ_t = logp − old (unclamped); δ̃_t = sign(A)·min(sign(A)·δ_t, sign(A)·clip(δ_t, −ε_low, ε_high));
    r_i = exp(Σ_t m·δ̃_t / (|y_i| + 1e-8)); Ā_i = Σ_t m·A / (|y_i| + 1e-8); loss_i = −Ā_i·r_i;
    IS weights enter as their per-sequence geometric mean. `loss_agg_mode` is not used: the loss is the
    mean of loss_i over sequences. verl averages over all rows; rows without a valid token (e.g. all
    rejected by rollout_rs) are left out here, as in every seq-mean mode, so that micro-batches add up to
    the mini-batch (equal whenever every row has a token). Clip fractions: clipped tokens with A > 0
    (pg_clipfrac) and A < 0 (pg_clipfrac_lower).
    """
    low, high = (config or ActorLossSettings()).clip_range()
    negative_approx_kl = log_prob - old_log_prob
    sign = torch.sign(advantages)
    clamped = torch.clamp(negative_approx_kl, -low, high)
    clipped_kl = sign * torch.min(sign * negative_approx_kl, sign * clamped)
    lengths = response_mask.sum(dim=-1)
    ratio = torch.exp((clipped_kl * response_mask).sum(dim=-1) / (lengths + 1e-8))  # (B,)
    seq_advantage = (advantages * response_mask).sum(dim=-1) / (lengths + 1e-8)
    pg_losses = -seq_advantage * ratio
    if rollout_is_weights is not None:
        log_weights = (torch.log(rollout_is_weights + 1e-10) * response_mask).sum(dim=-1)
        pg_losses = pg_losses * torch.exp(log_weights / (lengths + 1e-8))
    has_tokens = (lengths > 0).to(pg_losses.dtype)
    pg_loss = agg_loss(pg_losses.unsqueeze(-1), has_tokens.unsqueeze(-1), "seq-mean-token-sum")  # (B, 1) rows
    clipped = torch.ne(negative_approx_kl, clamped)
    return pg_loss, pg_metrics(masked_mean((clipped * (advantages > 0)).float(), response_mask),
                               masked_mean(-negative_approx_kl, response_mask),
                               masked_mean((clipped * (advantages < 0)).float(), response_mask))
