"""Rollout correction: importance weights and rejection masks for the mismatch between the rollout engine's
probabilities and the trainer's (verl HEAD `algorithm.rollout_correction`, rollout_corr_helper.py; Yao et
al., "Your efficient RL framework secretly brings you off-policy RL training"; IcePop; docs/algo/
rollout_corr_math.md in verl).

ρ_t = π_train(y_t)/π_rollout(y_t) from `log_ratio = log π_train − log π_rollout`, where π_train is
π_old (decoupled mode: the trainer's old_log_prob pass) or π_θ (bypass mode: inside the loss).
- `rollout_is`: token (w_t = ρ_t), sequence (w = Π_t ρ_t on every token), or geometric (w = (Π_t ρ_t)^(1/|y|),
  verl 0.6.0's level). Log-ratios (their sums and means) are clamped to ±20 before exp (the safety clamp).
  `rollout_is_threshold`: a number C truncates, w ← min(w, C) (TIS); a "lower_upper" string zeroes weights
  outside [lower, upper] (IcePop). Weights are detached (they change the measure, not the objective).
  `rollout_is_batch_normalize` divides them by their mean (over tokens; per sequence for sequence levels).
- `rollout_rs` (rejection_sampling.py) and the per-token veto (verl 0.6.1 `rollout_token_veto_threshold`:
  a sequence with any ρ_t below it is dropped) zero the response mask instead.

How it plugs in (the trainer's wiring; this module only computes):
- every step with rollout log-probs: `rollout_corr_metrics(old_log_prob, rollout_log_prob, mask)` into the
  step metrics, also with correction off, so the mismatch is visible before anything is corrected;
- decoupled mode (`bypass_mode=false`), after old_log_prob: `weights, mask, metrics =
  compute_rollout_correction_and_rejection_mask(old_log_probs, rollout_log_probs, response_mask, **settings)`;
  the batch's `response_mask` becomes `mask` (before advantages) and `weights` go to the policy loss as
  `rollout_is_weights` (each loss multiplies its token losses by them);
- bypass mode: old_log_probs := rollout_log_probs (no old_log_prob pass) and the actor's loss_mode becomes
  `bypass_mode` with these settings in `policy_loss.rollout_correction` (bypass_loss.py), which computes
  weights from π_θ inside the loss: `loss_type=ppo_clip` clips π_θ/π_rollout, `reinforce` weights log π_θ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from hybridrl.algorithms.masked import masked_mean, masked_sum
from hybridrl.algorithms.records import VerlStyleRecord
from hybridrl.algorithms.rejection_sampling import SAFETY_BOUND, clamped_std, rollout_rejection_mask

ROLLOUT_IS_LEVELS = ("token", "sequence", "geometric")
METRIC_PREFIX = "rollout_corr/"


@dataclass(frozen=True)
class RolloutCorrectionSettings(VerlStyleRecord):
    """verl's `algorithm.rollout_correction` (HEAD names and defaults; the veto is verl 0.6.1's)."""

    rollout_is: str | None = None  # token | sequence | geometric; None = no weights
    rollout_is_threshold: float | str = 2.0  # C (TIS) or "lower_upper" (IcePop)
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None  # comma-separated rejection options; None = no rejection
    rollout_rs_threshold: float | str | None = None
    rollout_token_veto_threshold: float | None = None
    bypass_mode: bool = False
    loss_type: str = "ppo_clip"  # bypass mode: ppo_clip | reinforce


class RolloutCorrection(NamedTuple):
    """IS weights `(B, T)` (None when `rollout_is` is off), the response mask `(B, T)` after rejection, and
    the `rollout_corr/*` metrics as floats."""

    weights: torch.Tensor | None
    response_mask: torch.Tensor
    metrics: dict[str, float]


def parse_rollout_is_threshold(threshold: float | str) -> tuple[float, float | None]:
    """(upper, lower or None): a number (or a numeric string) is C; "lower_upper" gives both bounds."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float | str):
        raise ValueError(f"rollout_is_threshold={threshold!r} must be a number (TIS) or a 'lower_upper' string "
                         "(IcePop), e.g. 2.0 or '0.5_5.0'")
    lower_str, upper_str = str(threshold).strip().split("_", 1) if "_" in str(threshold) else (None, str(threshold))
    try:
        upper, lower = float(upper_str), (float(lower_str) if lower_str is not None else None)
    except ValueError as exc:
        raise ValueError(f"rollout_is_threshold={threshold!r} must be a number (TIS) or a 'lower_upper' string "
                         "(IcePop), e.g. 2.0 or '0.5_5.0'") from exc
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):
        raise ValueError(f"rollout_is_threshold={threshold!r}: bounds must be positive with lower <= upper")
    return upper, lower


def _raw_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(safety-clamped ρ-weights × mask `(B, T)`, the unclamped log-ratio the metrics read: `(B, T)` for
    token, `(B, 1)` per sequence otherwise)."""
    if level == "token":
        level_log_ratio = log_ratio
    elif level == "sequence":
        level_log_ratio = masked_sum(log_ratio, mask, axis=-1).unsqueeze(-1)
    else:  # geometric: the per-token geometric mean of the sequence's ratios
        level_log_ratio = masked_mean(log_ratio, mask, axis=-1).unsqueeze(-1)
    weights = torch.exp(torch.clamp(level_log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)).expand_as(log_ratio)
    return weights * mask, level_log_ratio


def rollout_is_weights(log_ratio: torch.Tensor, response_mask: torch.Tensor, rollout_is: str = "token",
                       rollout_is_threshold: float | str = 2.0, rollout_is_batch_normalize: bool = False
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Detached IS weights `(B, T)` (0 on padding) and the `rollout_is_*` metrics (0-d tensors), from
    `log_ratio = log π_train − log π_rollout (B, T)`. verl `compute_rollout_correction_weights`."""
    if rollout_is not in ROLLOUT_IS_LEVELS:
        raise ValueError(f"rollout_is={rollout_is!r} is not an IS level; choose one of {list(ROLLOUT_IS_LEVELS)} "
                         "or null (off)")
    upper, lower = parse_rollout_is_threshold(rollout_is_threshold)
    raw, level_log_ratio = _raw_weights(log_ratio, response_mask, rollout_is)
    if lower is None:
        weights = raw.clamp(max=upper)  # TIS
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))  # IcePop
    metrics = _is_metrics(weights, raw, level_log_ratio, response_mask, rollout_is, upper, lower)
    if lower is not None:
        metrics["rollout_is_oob_ratio"] = masked_mean(((raw < lower) | (raw > upper)).float(), response_mask)
    weights = weights.detach()
    if rollout_is_batch_normalize:
        weights, metrics["rollout_is_batch_norm_factor"] = _batch_normalize(weights, response_mask, rollout_is)
    return weights, metrics


def _batch_normalize(weights: torch.Tensor, mask: torch.Tensor, level: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Divide by the mean weight (over valid tokens; over sequences for sequence levels) unless it is
    ≤ 1e-8; returns (weights, the factor used, 1.0 when skipped). Over the tensors given: the caller
    passes the whole batch."""
    if level == "token":
        mean = masked_mean(weights, mask)
    else:
        seq_weights = masked_mean(weights, mask, axis=-1)
        seq_mask = (mask.sum(dim=-1) > 0).to(weights.dtype)
        mean = (seq_weights * seq_mask).sum() / seq_mask.sum().clamp_min(1e-8)
    factor = torch.where(mean > 1e-8, mean, torch.ones_like(mean))
    return weights / factor, factor


def _is_metrics(weights: torch.Tensor, raw: torch.Tensor, level_log_ratio: torch.Tensor, mask: torch.Tensor,
                level: str, upper: float, lower: float | None) -> dict[str, torch.Tensor]:
    """verl `compute_is_metrics`: sequence levels read max/min and the threshold fractions from the
    unclamped log-ratio; std and ESS come from the applied weights clamped to [0, upper]."""
    lower = 1.0 / upper if lower is None else lower
    valid = mask.bool()
    out = {"rollout_is_mean": masked_mean(weights, mask)}
    if level == "token":
        out["rollout_is_ratio_fraction_high"] = masked_mean((raw > upper).float(), mask)
        out["rollout_is_ratio_fraction_low"] = masked_mean((raw < lower).float(), mask)
        out["rollout_is_max"] = weights.masked_fill(~valid, float("-inf")).max()
        out["rollout_is_min"] = weights.masked_fill(~valid, float("inf")).min()
    else:
        out["rollout_is_max"] = torch.exp(torch.clamp(level_log_ratio.max(), max=SAFETY_BOUND))
        out["rollout_is_min"] = torch.exp(level_log_ratio.min())
        out["rollout_is_ratio_fraction_high"] = (level_log_ratio > torch.tensor(upper).log()).float().mean()
        out["rollout_is_ratio_fraction_low"] = (level_log_ratio < torch.tensor(lower).log()).float().mean()
    out["rollout_is_std"] = clamped_std(weights, mask, 0.0, upper)
    bounded = weights.clamp(min=0.0, max=upper)
    normalized = bounded / (masked_mean(bounded, mask) + 1e-8)
    out["rollout_is_eff_sample_size"] = 1.0 / masked_mean(normalized.square(), mask).double()
    seq_means = masked_mean(weights, mask, axis=-1)  # (B,), fully masked rows give 0 and count
    out["rollout_is_seq_mean"] = seq_means.mean()
    out["rollout_is_seq_std"] = seq_means.std() if seq_means.numel() > 1 else seq_means.new_zeros(())
    out["rollout_is_seq_max"], out["rollout_is_seq_min"] = seq_means.max(), seq_means.min()
    out["rollout_is_seq_max_deviation"] = (seq_means - 1.0).abs().max()
    raw_seq_means = masked_mean(raw, mask, axis=-1)  # before truncation, or the high fraction could never fire
    out["rollout_is_seq_fraction_high"] = (raw_seq_means > upper).float().mean()
    out["rollout_is_seq_fraction_low"] = (raw_seq_means < lower).float().mean()
    return out


def offpolicy_metrics(log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                      response_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """verl `compute_offpolicy_metrics` (0-d tensors, no prefix), all `(B, T)` inputs:
    kl = E[log π_rollout − log π_train] (k1 of KL(π_rollout‖π_train)), k3_kl = E[ρ − log ρ − 1];
    training/rollout ppl = batch mean of exp(−mean token log-prob) per sequence and the log versions;
    log_ppl_diff = per-sequence mean log π_rollout − mean log π_train (mean, |mean|, max, min);
    ppl_ratio = mean exp(log_ppl_diff); chi2_token = E_tok[ρ²] − 1; chi2_seq = E_seq[(Π ρ)²] − 1
    (ρ and Σ log ρ clamped to ±20)."""
    train_mean = masked_mean(log_prob, response_mask, axis=-1)  # (B,)
    rollout_mean = masked_mean(rollout_log_prob, response_mask, axis=-1)
    log_ratio = log_prob - rollout_log_prob
    log_ppl_diff = rollout_mean - train_mean
    rho = torch.exp(torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND))
    seq_log_ratio = torch.clamp(masked_sum(log_ratio, response_mask, axis=-1), min=-SAFETY_BOUND, max=SAFETY_BOUND)
    return {
        "training_ppl": torch.exp(-train_mean).mean(), "training_log_ppl": (-train_mean).mean(),
        "kl": masked_mean(rollout_log_prob - log_prob, response_mask),
        "k3_kl": masked_mean(torch.exp(log_ratio) - log_ratio - 1, response_mask),
        "rollout_ppl": torch.exp(-rollout_mean).mean(), "rollout_log_ppl": (-rollout_mean).mean(),
        "log_ppl_diff": log_ppl_diff.mean(), "log_ppl_abs_diff": log_ppl_diff.abs().mean(),
        "log_ppl_diff_max": log_ppl_diff.max(), "log_ppl_diff_min": log_ppl_diff.min(),
        "ppl_ratio": torch.exp(log_ppl_diff).mean(),
        "chi2_token": masked_mean(rho.square(), response_mask) - 1.0,
        "chi2_seq": torch.exp(2.0 * seq_log_ratio).mean() - 1.0,
    }


def _veto(log_ratio: torch.Tensor, response_mask: torch.Tensor, mask: torch.Tensor,
          threshold: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """verl 0.6.1's per-token veto: a sequence with a valid token (of the original `response_mask`) whose
    ρ < threshold is dropped whole from `mask` (the mask after rejection sampling)."""
    if threshold <= 0:
        raise ValueError(f"rollout_token_veto_threshold={threshold} must be positive (e.g. 1e-4)")
    catastrophic = (log_ratio < torch.tensor(threshold).log()) & response_mask.bool()
    vetoed = catastrophic.any(dim=-1, keepdim=True)
    metrics = {"rollout_is_veto_fraction": vetoed.float().mean(),
               "rollout_is_catastrophic_token_fraction": masked_mean(catastrophic.float(), response_mask)}
    return mask * (~vetoed).to(mask.dtype), metrics


def _as_floats(metrics: dict[str, torch.Tensor]) -> dict[str, float]:
    """`rollout_corr/`-prefixed floats with one device→host copy for all of them."""
    values = torch.stack([value.detach().to(torch.float64).reshape(()) for value in metrics.values()]).tolist()
    return {f"{METRIC_PREFIX}{name}": value for name, value in zip(metrics, values)}


def _check_inputs(train_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor) -> None:
    if train_log_prob.shape != rollout_log_prob.shape or train_log_prob.shape != response_mask.shape:
        raise ValueError(f"rollout correction needs equal shapes (B, T); got log-probs {tuple(train_log_prob.shape)}, "
                         f"rollout log-probs {tuple(rollout_log_prob.shape)}, mask {tuple(response_mask.shape)}")
    if not response_mask.any():
        raise ValueError("rollout correction got a response_mask with no valid token")


def compute_rollout_correction_and_rejection_mask(
        old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor,
        rollout_is: str | None = None, rollout_is_threshold: float | str | None = 2.0,
        rollout_is_batch_normalize: bool = False, rollout_rs: str | None = None,
        rollout_rs_threshold: float | str | None = None, rollout_token_veto_threshold: float | None = None
        ) -> RolloutCorrection:
    """The one call of a correction step (verl's function of this name): IS weights from
    `old_log_prob − rollout_log_prob` (π_old, or π_θ in bypass mode), the response mask after rejection
    and veto, and every metric (IS, RS, off-policy) under `rollout_corr/`. All tensors `(B, T)`."""
    _check_inputs(old_log_prob, rollout_log_prob, response_mask)
    weights, mask, metrics = _correction_tensors(
        old_log_prob - rollout_log_prob, response_mask, rollout_is, rollout_is_threshold, rollout_is_batch_normalize,
        rollout_rs, rollout_rs_threshold, rollout_token_veto_threshold)
    metrics.update(offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask))
    return RolloutCorrection(weights, mask, _as_floats(metrics))


def _correction_tensors(log_ratio: torch.Tensor, response_mask: torch.Tensor, rollout_is: str | None,
                        rollout_is_threshold: float | str | None, rollout_is_batch_normalize: bool,
                        rollout_rs: str | None, rollout_rs_threshold: float | str | None,
                        rollout_token_veto_threshold: float | None
                        ) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, torch.Tensor]]:
    """(IS weights or None, mask after rejection and veto, IS/RS metrics as 0-d tensors), all from `log_ratio`."""
    metrics: dict[str, torch.Tensor] = {}
    weights = None
    if rollout_is is not None and rollout_is_threshold is not None:
        weights, is_metrics = rollout_is_weights(log_ratio, response_mask, rollout_is, rollout_is_threshold,
                                                 rollout_is_batch_normalize)
        metrics.update(is_metrics)
    mask = response_mask.clone()
    if rollout_rs is not None:
        mask, rs_metrics = rollout_rejection_mask(log_ratio, response_mask, rollout_rs, rollout_rs_threshold)
        metrics.update(rs_metrics)
    if rollout_token_veto_threshold is not None:
        mask, veto_metrics = _veto(log_ratio, response_mask, mask, rollout_token_veto_threshold)
        metrics.update(veto_metrics)
    return weights, mask, metrics


def correction_weights_and_mask(train_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                                response_mask: torch.Tensor, settings: RolloutCorrectionSettings
                                ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The IS weights (or None) and the filtered response mask of `compute_rollout_correction`, without its
    metrics' device-to-host copy: what a micro-batch's loss needs (the metrics are taken once per mini-batch).
    `(B, T)` tensors; a micro-batch without a valid token is allowed (its mask stays empty, its weights 0)."""
    if train_log_prob.shape != rollout_log_prob.shape or train_log_prob.shape != response_mask.shape:
        _check_inputs(train_log_prob, rollout_log_prob, response_mask)
    weights, mask, _ = _correction_tensors(
        train_log_prob - rollout_log_prob, response_mask, settings.rollout_is, settings.rollout_is_threshold,
        settings.rollout_is_batch_normalize, settings.rollout_rs, settings.rollout_rs_threshold,
        settings.rollout_token_veto_threshold)
    return weights, mask


def compute_rollout_correction(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                               response_mask: torch.Tensor, settings: RolloutCorrectionSettings) -> RolloutCorrection:
    """`compute_rollout_correction_and_rejection_mask` with the settings record."""
    return compute_rollout_correction_and_rejection_mask(
        old_log_prob, rollout_log_prob, response_mask, rollout_is=settings.rollout_is,
        rollout_is_threshold=settings.rollout_is_threshold,
        rollout_is_batch_normalize=settings.rollout_is_batch_normalize, rollout_rs=settings.rollout_rs,
        rollout_rs_threshold=settings.rollout_rs_threshold,
        rollout_token_veto_threshold=settings.rollout_token_veto_threshold)


def rollout_corr_metrics(log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                         response_mask: torch.Tensor) -> dict[str, float]:
    """The metrics-only call for every step, correction on or off (verl
    `compute_rollout_corr_metrics_from_logprobs`): `rollout_corr/{kl, k3_kl, training_ppl, rollout_ppl,
    log_ppl_diff, log_ppl_abs_diff, ppl_ratio, chi2_token, chi2_seq, ...}`. `(B, T)` inputs; an empty
    mask gives no metrics."""
    if not response_mask.any():
        return {}
    _check_inputs(log_prob, rollout_log_prob, response_mask)
    return _as_floats(offpolicy_metrics(log_prob, rollout_log_prob, response_mask))
