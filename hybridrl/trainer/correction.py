"""Rollout correction in the trainer's step: which log-probs π_old is, and the decoupled correction's batch work.

`algorithm.rollout_correction` (verl HEAD; algorithms/rollout_correction.py has the math):
- bypass mode: π_old := π_rollout. No old_log_prob pass; the batch's `old_log_probs` are the engine's own
  log-probs, and the actor computes the weights and the rejection mask from π_θ inside its loss
  (workers/update_correction.py).
- decoupled mode (default): after the old_log_prob pass, the weights π_old/π_rollout and the rejection mask are
  computed here over the whole batch (batch normalisation is over the whole batch), before the advantages: the
  batch's `response_mask` becomes the filtered one (advantages, every loss term and the micro-batch weights all
  use it) and the weights travel to the loss as `rollout_is_weights`. The `rollout_corr/*` metrics are logged
  on every step with rollout log-probs, correction on or off.
- the on-policy shortcut (no pass; `actor.reuse_on_policy_log_prob`) stays on when only IS weights are asked
  for: π_old is then the update's own forward, which computes them per micro-batch. Rejection sampling and batch
  normalisation need the whole batch's π_old before any backward, so they keep the pass.

The engine always returns its log-probs (`rollout_log_probs`), so `actor_rollout_ref.rollout.calculate_log_probs`
has no effect here.
"""

from __future__ import annotations

from hybridrl.algorithms.rejection_sampling import parse_rollout_rs
from hybridrl.algorithms.rollout_correction import (ROLLOUT_IS_LEVELS, RolloutCorrectionSettings,
                                                    compute_rollout_correction, parse_rollout_is_threshold)
from hybridrl.config import ConfigError, HybridRLConfig
from hybridrl.utils.batch import Batch
from hybridrl.workers.update_correction import correction_settings

KEY = "algorithm.rollout_correction"


def checked_settings(cfg: HybridRLConfig) -> RolloutCorrectionSettings:
    """The settings, with every option and threshold string parsed; ConfigError naming the key otherwise."""
    settings = correction_settings(cfg.algorithm.rollout_correction)
    problems = []
    if settings.rollout_is is not None and settings.rollout_is not in ROLLOUT_IS_LEVELS:
        problems.append(f"{KEY}.rollout_is={settings.rollout_is!r} is not an IS level; use one of "
                        f"{list(ROLLOUT_IS_LEVELS)} or null (off)")
    for name, check in (("rollout_is_threshold", lambda: parse_rollout_is_threshold(settings.rollout_is_threshold)),
                        ("rollout_rs", lambda: settings.rollout_rs is None or parse_rollout_rs(
                            settings.rollout_rs, settings.rollout_rs_threshold))):
        try:
            check()
        except ValueError as err:
            problems.append(f"{KEY}.{name}: {err}")
    if problems:
        raise ConfigError(f"{len(problems)} config problem(s):\n" + "\n".join(f"  - {p}" for p in problems))
    return settings


def needs_whole_batch(settings: RolloutCorrectionSettings) -> bool:
    """Decoupled correction that the on-policy shortcut cannot compute inside the update (see module doc)."""
    return not settings.bypass_mode and (settings.rollout_rs is not None or settings.rollout_is_batch_normalize)


def bypass_old_log_probs(batch: Batch) -> Batch:
    """Bypass mode's π_old := π_rollout (verl `apply_bypass_mode`)."""
    if "rollout_log_probs" not in batch:
        raise ValueError("algorithm.rollout_correction.bypass_mode=true needs the rollout's log-probs "
                         "(rollout_log_probs), and this batch has none")
    batch["old_log_probs"] = batch["rollout_log_probs"].clone()
    return batch


def decoupled_correction(batch: Batch, settings: RolloutCorrectionSettings, metrics: dict[str, float]) -> Batch:
    """Decoupled mode after the old_log_prob pass: IS weights into the batch, the filtered response mask, and the
    `rollout_corr/*` metrics (also with correction off). Nothing without rollout or old log-probs (the shortcut:
    the update reports them) or without a valid token."""
    if settings.bypass_mode or "rollout_log_probs" not in batch or "old_log_probs" not in batch:
        return batch
    if not batch["response_mask"].any():
        return batch
    weights, mask, corr_metrics = compute_rollout_correction(batch["old_log_probs"].float(),
                                                             batch["rollout_log_probs"].float(),
                                                             batch["response_mask"], settings)
    metrics.update(corr_metrics)
    batch["response_mask"] = mask.to(batch["response_mask"].dtype)
    if weights is not None:
        batch["rollout_is_weights"] = weights
    return batch
