"""PPO-family policy losses on `(B, T)` log-probs (verl/trainer/ppo/core_algos.py §4.4).

`POLICY_LOSSES` maps `actor.policy_loss.loss_mode` to functions with one uniform signature returning
`(pg_loss, {"pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"})`, so the actor never branches on the mode.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hybridrl.algorithms.aggregate import agg_loss
from hybridrl.algorithms.masked import masked_mean

LOG_RATIO_CLAMP = 20.0  # PPO log-ratio clamped to ±20 before exp
GSPO_LOG_RATIO_MAX = 10.0  # GSPO token log-ratio clamped above at 10


def compute_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                        response_mask: torch.Tensor, cliprange: float | None = None,
                        cliprange_low: float | None = None, cliprange_high: float | None = None,
                        clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean",
                        rollout_is_weights: torch.Tensor | None = None, loss_scale_factor: float | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped PPO (Schulman et al. 2017) with dual-clip for A < 0 (Ye et al. 2019, arXiv 1912.09729).

    r = exp(clamp(logp − old, ±20));  L1 = −A·r;  L2 = −A·clip(r, 1−ε_low, 1+ε_high);  C1 = max(L1, L2);
    L3 = −A·c;  loss = min(L3, C1) where A < 0 else C1;  × rollout_is_weights;  aggregated by agg_loss.
    Returns (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower) as scalars.
    """
    if not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for dual-clip PPO (got {clip_ratio_c}); the default is 3.0")
    cliprange_low = cliprange if cliprange_low is None else cliprange_low
    cliprange_high = cliprange if cliprange_high is None else cliprange_high
    if cliprange_low is None or cliprange_high is None:
        raise ValueError("compute_policy_loss needs cliprange, or both cliprange_low and cliprange_high")
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (advantages < 0).float(), response_mask)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, loss_scale_factor)
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


def compute_policy_loss_gspo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                             response_mask: torch.Tensor, clip_ratio_low: float, clip_ratio_high: float,
                             loss_agg_mode: str = "seq-mean-token-mean",
                             rollout_is_weights: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): sequence-level importance ratio.

    log s_i = Σ_t m·(logp − old) / max(|y_i|, 1) (no ±20 clamp);
    token ratio s_{i,t} = exp(min(logp − sg(logp) + sg(log s_i), 10)), whose value is s_i and whose
    gradient is that of logp; then PPO clip with (low, high). pg_clipfrac_lower is always 0.
    """
    negative_approx_kl = log_prob - old_log_prob
    seq_lengths = torch.sum(response_mask, dim=-1).clamp(min=1)
    negative_approx_kl_seq = torch.sum(negative_approx_kl * response_mask, dim=-1) / seq_lengths  # (B,)
    log_seq_ratio = log_prob - log_prob.detach() + negative_approx_kl_seq.detach().unsqueeze(-1)
    seq_importance_ratio = torch.exp(torch.clamp(log_seq_ratio, max=GSPO_LOG_RATIO_MAX))
    pg_losses1 = -advantages * seq_importance_ratio
    pg_losses2 = -advantages * torch.clamp(seq_importance_ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)
    return pg_loss, pg_clipfrac, ppo_kl, torch.zeros((), device=pg_loss.device)


PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]


def _metrics(clipfrac: torch.Tensor, ppo_kl: torch.Tensor, clipfrac_lower: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"pg_clipfrac": clipfrac, "ppo_kl": ppo_kl, "pg_clipfrac_lower": clipfrac_lower}


def vanilla_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                        response_mask: torch.Tensor, *, clip_ratio_low: float, clip_ratio_high: float,
                        clip_ratio_c: float, loss_agg_mode: str, rollout_is_weights: torch.Tensor | None = None,
                        loss_scale_factor: float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`loss_mode: vanilla` — PPO + dual-clip, aggregated with `loss_agg_mode` (and `loss_scale_factor`, the
    divisor of seq-mean-token-sum-norm)."""
    pg_loss, *metrics = compute_policy_loss(old_log_prob, log_prob, advantages, response_mask,
                                            cliprange_low=clip_ratio_low, cliprange_high=clip_ratio_high,
                                            clip_ratio_c=clip_ratio_c, loss_agg_mode=loss_agg_mode,
                                            rollout_is_weights=rollout_is_weights, loss_scale_factor=loss_scale_factor)
    return pg_loss, _metrics(*metrics)


def gspo_policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                     response_mask: torch.Tensor, *, clip_ratio_low: float, clip_ratio_high: float,
                     clip_ratio_c: float, loss_agg_mode: str, rollout_is_weights: torch.Tensor | None = None,
                     loss_scale_factor: float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`loss_mode: gspo` — like verl, always aggregates with seq-mean-token-mean whatever `loss_agg_mode`
    says (so `loss_scale_factor`, a seq-mean-token-sum-norm divisor, does not apply), and ignores
    `clip_ratio_c` (no dual clip)."""
    pg_loss, *metrics = compute_policy_loss_gspo(old_log_prob, log_prob, advantages, response_mask,
                                                 clip_ratio_low, clip_ratio_high, "seq-mean-token-mean",
                                                 rollout_is_weights=rollout_is_weights)
    return pg_loss, _metrics(*metrics)


POLICY_LOSSES: dict[str, PolicyLossFn] = {"vanilla": vanilla_policy_loss, "gspo": gspo_policy_loss}
# Policy losses that aggregate one way whatever actor.loss_agg_mode says.
FIXED_AGG_MODES = {"gspo": "seq-mean-token-mean"}


def policy_agg_mode(loss_mode: str, loss_agg_mode: str) -> str:
    """How `loss_mode`'s policy loss is really aggregated (what its micro-batch weight must follow)."""
    return FIXED_AGG_MODES.get(loss_mode, loss_agg_mode)


def get_policy_loss_fn(loss_mode: str) -> PolicyLossFn:
    """The function for `actor.policy_loss.loss_mode`; unknown → ValueError listing the supported modes."""
    if loss_mode not in POLICY_LOSSES:
        raise ValueError(
            f"actor.policy_loss.loss_mode={loss_mode!r} is not supported; choose one of {sorted(POLICY_LOSSES)}"
        )
    return POLICY_LOSSES[loss_mode]
