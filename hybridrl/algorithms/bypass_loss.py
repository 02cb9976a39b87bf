"""`loss_mode: bypass_mode` (verl core_algos `compute_policy_loss_bypass_mode`): rollout correction
with two policies, π_rollout and π_θ. The trainer skips the old_log_prob pass and hands the loss
old_log_prob = rollout log-probs; the IS weights and rejection mask are computed here from π_θ/π_rollout
(rollout_correction.py, without gradient), then:
- loss_type=ppo_clip: vanilla PPO on r = π_θ/π_rollout over the rejection-filtered mask; the clipped
  ratio already is the IS correction, so no weights are applied (they would count it twice);
- loss_type=reinforce: −A·w·log π_θ with the truncated weights w (pg_losses.compute_policy_loss_reinforce).
The `rollout_corr/*` metrics join the loss metrics.
"""

from __future__ import annotations

import torch

from hybridrl.algorithms.loss_settings import ActorLossSettings
from hybridrl.algorithms.pg_losses import compute_policy_loss_reinforce
from hybridrl.algorithms.ppo_losses import Metrics, compute_policy_loss_vanilla
from hybridrl.algorithms.rollout_correction import RolloutCorrection, compute_rollout_correction

BYPASS_LOSS_TYPES = ("ppo_clip", "reinforce")


def compute_policy_loss_bypass_mode(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                    response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                                    config: ActorLossSettings | None = None,
                                    rollout_is_weights: torch.Tensor | None = None
                                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor | float]]:
    """Bypass-mode loss; `old_log_prob` is π_rollout's. `rollout_is_weights` is ignored: the weights come
    from π_θ here. Settings: `config.policy_loss.rollout_correction` (a RolloutCorrectionSettings)."""
    config = config or ActorLossSettings()
    settings = config.policy_loss.rollout_correction
    if settings is None:
        raise ValueError("loss_mode=bypass_mode needs the rollout correction settings "
                         "(ActorLossSettings.policy_loss.rollout_correction); the trainer sets them from "
                         "algorithm.rollout_correction when bypass_mode=true")
    if settings.loss_type not in BYPASS_LOSS_TYPES:
        raise ValueError(f"algorithm.rollout_correction.loss_type={settings.loss_type!r} is not a bypass loss; "
                         f"choose one of {list(BYPASS_LOSS_TYPES)}")
    rollout_log_prob = old_log_prob
    with torch.no_grad():
        correction = compute_rollout_correction(log_prob.detach(), rollout_log_prob, response_mask, settings)
    pg_loss, metrics = bypass_policy_loss(rollout_log_prob, log_prob, advantages, correction, settings.loss_type,
                                          loss_agg_mode, config)
    out: dict[str, torch.Tensor | float] = dict(metrics)
    out.update(correction.metrics)
    return pg_loss, out


def bypass_policy_loss(rollout_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                       correction: RolloutCorrection, loss_type: str, loss_agg_mode: str,
                       config: ActorLossSettings) -> tuple[torch.Tensor, Metrics]:
    """The policy loss of bypass mode given the correction of π_θ against π_rollout (computed without gradient):
    over its rejection-filtered mask, PPO clipping of π_θ/π_rollout or REINFORCE with its weights. The actor
    calls this directly, since it needs the filtered mask itself (its micro-batch weights count those tokens)."""
    if loss_type == "reinforce":
        return compute_policy_loss_reinforce(rollout_log_prob, log_prob, advantages, correction.response_mask,
                                             loss_agg_mode, config, rollout_is_weights=correction.weights)
    return compute_policy_loss_vanilla(rollout_log_prob, log_prob, advantages, correction.response_mask,
                                       loss_agg_mode, config)
