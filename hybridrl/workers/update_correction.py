"""Rollout correction where the training policy's log-probs exist only inside the actor's update.

Three ways the IS weights and the rejection mask (`algorithm.rollout_correction`, algorithms/rollout_correction.py)
reach the policy loss:
- decoupled mode with the old_log_prob pass: the controller computes them over the whole batch from π_old and
  π_rollout (trainer/correction.py); the batch's `response_mask` is already the filtered one and the weights
  travel as `rollout_is_weights`. Nothing happens here.
- decoupled mode, on-policy shortcut (no pass: one epoch over one mini-batch, so π_old is this forward's own
  log-probs, detached): each micro-batch computes its weights from π_old/π_rollout here. The trainer keeps the
  pass when rejection sampling or batch normalisation is on, which need the whole batch before any backward.
- bypass mode (π_old := π_rollout, no pass): each micro-batch computes weights and mask from π_θ/π_rollout, as
  verl's `compute_policy_loss_bypass_mode`; batch normalisation then runs over the micro-batch (as in verl,
  whose loss sees one micro-batch at a time). The mask only exists after the micro-batch's forward, so the
  mini-batch's filtered token counts are known after its last backward: `loss_scope.MicroBatchWeights` weights
  each micro-batch by its filtered share of the unfiltered counts, and the gradients are rescaled by
  unfiltered / filtered before the optimizer step, which makes the loss the mean over the kept tokens.
In the last two cases the `rollout_corr/*` metrics are computed once per mini-batch from the forwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hybridrl.algorithms.rollout_correction import (RolloutCorrectionSettings, compute_rollout_correction,
                                                    correction_weights_and_mask)


def correction_settings(correction_cfg) -> RolloutCorrectionSettings:
    """`algorithm.rollout_correction` (a schema section) as the algorithms' settings record."""
    return RolloutCorrectionSettings(
        rollout_is=correction_cfg.rollout_is, rollout_is_threshold=correction_cfg.rollout_is_threshold,
        rollout_is_batch_normalize=correction_cfg.rollout_is_batch_normalize, rollout_rs=correction_cfg.rollout_rs,
        rollout_rs_threshold=correction_cfg.rollout_rs_threshold, bypass_mode=correction_cfg.bypass_mode,
        loss_type=correction_cfg.loss_type)


@dataclass(frozen=True)
class UpdateMode:
    """How one update gets its old log-probs and its correction."""

    on_policy: bool  # old log-probs are this forward's own, detached (the on-policy shortcut)
    corrects: bool  # IS weights and rejection mask computed per micro-batch, here
    reports_forward: bool  # no old_log_prob pass ran: actor/entropy and the mismatch metrics come from here


class UpdateCorrection:
    def __init__(self, settings: RolloutCorrectionSettings) -> None:
        self.settings = settings
        self.bypass = settings.bypass_mode

    @property
    def rejects(self) -> bool:
        """Whether a micro-batch's mask may lose tokens here (rejection sampling or the veto)."""
        return self.settings.rollout_rs is not None or self.settings.rollout_token_veto_threshold is not None

    def mode(self, on_policy: bool, has_rollout_log_probs: bool) -> UpdateMode:
        in_update = self.bypass or on_policy
        return UpdateMode(on_policy=on_policy, corrects=in_update and (self.bypass or has_rollout_log_probs),
                          reports_forward=in_update)

    def rollout_log_probs(self, micro) -> torch.Tensor:
        """π_rollout of a micro-batch: in bypass mode the trainer handed it over as the old log-probs."""
        return micro["old_log_probs"] if self.bypass else micro["rollout_log_probs"]

    def weights_and_mask(self, log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                         mask: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """IS weights (or None) and the filtered mask of one micro-batch, from the forward's `log_prob (B, T)`."""
        with torch.no_grad():
            return correction_weights_and_mask(log_prob.detach().float(), rollout_log_prob.float(), mask,
                                               self.settings)

    def metrics(self, log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                mask: torch.Tensor) -> dict[str, float]:
        """`rollout_corr/*` of a mini-batch (its micro-batches' forwards concatenated), correction on or off."""
        if not mask.any():
            return {}
        return compute_rollout_correction(log_prob.float(), rollout_log_prob.float(), mask, self.settings).metrics
