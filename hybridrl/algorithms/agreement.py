"""How closely the rollout backend's log-probs match the trainer's (verl's `training/rollout_probs_diff_*`)."""

from __future__ import annotations

import torch


def rollout_agreement_metrics(rollout_log_probs: torch.Tensor, trainer_log_probs: torch.Tensor,
                              mask: torch.Tensor) -> dict[str, float]:
    """Mean and max |p_rollout - p_trainer| and |log p_rollout - log p_trainer| over the response tokens.

    Log-prob gaps too: with a large vocabulary most token probabilities are tiny, so probability gaps look
    like zero even when the two forwards disagree. Empty masks give no metrics.
    """
    valid = mask.bool()
    if not valid.any():
        return {}
    rollout, trainer = rollout_log_probs.float()[valid], trainer_log_probs.float()[valid]
    diff = (rollout.exp() - trainer.exp()).abs()
    lp_diff = (rollout - trainer).abs()
    return {"training/rollout_probs_diff_mean": diff.mean().item(),
            "training/rollout_probs_diff_max": diff.max().item(),
            "training/rollout_log_probs_diff_mean": lp_diff.mean().item(),
            "training/rollout_log_probs_diff_max": lp_diff.max().item()}
