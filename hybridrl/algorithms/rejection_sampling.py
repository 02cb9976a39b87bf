"""Rollout rejection sampling (verl HEAD `rollout_rs`): a hard trust region that zeroes the response mask
where a divergence estimate between the training and rollout policies leaves its threshold
(verl/trainer/ppo/rollout_corr_helper.py `compute_rollout_rejection_mask`, `compute_rs_metrics`).

With ρ = π_train/π_rollout and lr = clamp(log ρ, ±20): k1 = −lr, k2 = lr²/2, k3 = e^lr − 1 − lr per token
(Schulman's estimators of KL(π_rollout‖π_train)). Options, comma-separated, all must pass:
token_k{1,2,3} (per token), seq_sum_k{1,2,3}, seq_mean_k{1,2,3}, seq_max_k{2,3} (per sequence; a rejected
sequence loses all its tokens). `seq_mean_k1` is the geometric-mean ratio test (Geo-RS), `seq_sum_k1` the
sequence ratio test (Seq-MIS). k1 thresholds are ratio bounds "lower_upper" (one number u means 1/u_u),
checked as log(lower) ≤ k1 ≤ log(upper); k2/k3 take one upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hybridrl.algorithms.masked import masked_mean, masked_sum

SAFETY_BOUND = 20.0  # log-ratios are clamped to ±20 before exp (e^20 ≈ 4.9e8)
ROLLOUT_RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
                      "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")


@dataclass(frozen=True)
class RejectionThreshold:
    """Bounds of one option, in the statistic's units: log-ratio bounds for k1, the upper bound otherwise."""

    upper: float
    lower: float | None  # only k1 options have one


def parse_rollout_rs(rollout_rs: str, rollout_rs_threshold: str | float | None) -> dict[str, RejectionThreshold]:
    """Options in order (duplicates dropped) → their thresholds. One threshold is shared by all options,
    or one per option, comma-separated."""
    options = list(dict.fromkeys(part.strip() for part in str(rollout_rs).split(",") if part.strip()))
    unknown = [opt for opt in options if opt not in ROLLOUT_RS_OPTIONS]
    if not options or unknown:
        raise ValueError(f"rollout_rs={rollout_rs!r}: {unknown or 'no option'} is not a rejection option; choose "
                         f"comma-separated options from {list(ROLLOUT_RS_OPTIONS)}")
    if rollout_rs_threshold is None:
        raise ValueError(f"rollout_rs={rollout_rs!r} needs rollout_rs_threshold (e.g. 2.0, or '0.5_2.0' for k1)")
    specs = ([str(rollout_rs_threshold)] if isinstance(rollout_rs_threshold, int | float)
             else [part.strip() for part in str(rollout_rs_threshold).split(",") if part.strip()])
    if len(specs) not in (1, len(options)):
        raise ValueError(f"rollout_rs_threshold={rollout_rs_threshold!r} gives {len(specs)} thresholds for "
                         f"{len(options)} rollout_rs options; give one shared threshold or one per option")
    specs = specs * len(options) if len(specs) == 1 else specs
    return {opt: _parse_threshold(opt, spec) for opt, spec in zip(options, specs)}


def _parse_threshold(option: str, spec: str) -> RejectionThreshold:
    if not option.endswith("k1") and "_" in spec:
        raise ValueError(f"rollout_rs_threshold {spec!r} for {option}: k2/k3 options take one upper bound")
    lower_str, upper_str = spec.split("_", 1) if "_" in spec else (None, spec)
    try:
        upper = float(upper_str)
        lower = float(lower_str) if lower_str is not None else (1.0 / upper if option.endswith("k1") else None)
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"rollout_rs_threshold {spec!r} for {option} is not a positive number"
                         f"{' or lower_upper pair' if option.endswith('k1') else ''}") from exc
    if upper <= 0 or (lower is not None and (lower <= 0 or lower > upper)):
        raise ValueError(f"rollout_rs_threshold {spec!r} for {option} must be positive (and lower <= upper)")
    if lower is None:
        return RejectionThreshold(upper=upper, lower=None)
    return RejectionThreshold(upper=math.log(upper), lower=math.log(lower))


def _sequence_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over valid tokens per row `(B,)`; 0 for a row without one."""
    maxima = values.masked_fill(~mask.bool(), float("-inf")).max(dim=-1).values
    return torch.where(torch.isinf(maxima), torch.zeros_like(maxima), maxima)


def _statistic(option: str, log_ratio: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(per-token statistic `(B, T)`, per-sequence statistic `(B,)` or None for token options)."""
    safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    per_token = {"k1": -safe, "k2": 0.5 * safe**2, "k3": torch.exp(safe) - 1.0 - safe}[option[-2:]]
    if option.startswith("token"):
        return per_token, None
    reduce = {"seq_sum": lambda v: masked_sum(v, mask, axis=-1), "seq_mean": lambda v: masked_mean(v, mask, axis=-1),
              "seq_max": lambda v: _sequence_max(v, mask)}[option.rsplit("_", 1)[0]]
    per_sequence = reduce(per_token)
    return per_sequence.unsqueeze(-1).expand_as(log_ratio), per_sequence


def rollout_rejection_mask(log_ratio: torch.Tensor, response_mask: torch.Tensor, rollout_rs: str,
                           rollout_rs_threshold: str | float | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`response_mask (B, T)` with rejected tokens zeroed, and `rollout_rs_*` metrics (0-d tensors).

    `log_ratio = log π_train − log π_rollout`, `(B, T)`. Per option: `rollout_rs_<option>_{mean, max, min,
    std, fraction_high, fraction_low, seq_*, masked_fraction, seq_masked_fraction}`; overall
    `rollout_rs_masked_fraction` (of valid tokens) and `rollout_rs_seq_masked_fraction` (of rows).
    """
    thresholds = parse_rollout_rs(rollout_rs, rollout_rs_threshold)
    valid = response_mask.bool()
    keep = torch.ones_like(log_ratio)
    metrics: dict[str, torch.Tensor] = {}
    for option, threshold in thresholds.items():
        per_token, per_sequence = _statistic(option, log_ratio, response_mask)
        option_keep = per_token <= threshold.upper
        if threshold.lower is not None:
            option_keep = option_keep & (per_token >= threshold.lower)
        metrics.update(_option_metrics(option, per_token, per_sequence, response_mask, threshold))
        keep = keep * option_keep.to(log_ratio.dtype)
        seq_kept = ~((~option_keep) & valid).any(dim=-1)
        metrics[f"rollout_rs_{option}_masked_fraction"] = masked_mean(1 - option_keep.to(log_ratio.dtype),
                                                                      response_mask)
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = _fraction(~seq_kept, _has_tokens(response_mask))
    metrics["rollout_rs_masked_fraction"] = masked_mean(1 - keep, response_mask)
    metrics["rollout_rs_seq_masked_fraction"] = ((keep <= 0.5) & valid).any(dim=-1).float().mean()
    return (response_mask * keep).to(response_mask.dtype), metrics


def _has_tokens(response_mask: torch.Tensor) -> torch.Tensor:
    return response_mask.sum(dim=-1) > 0


def _fraction(flags: torch.Tensor, among: torch.Tensor) -> torch.Tensor:
    """Share of `among` rows whose flag is set; 0 when there are none."""
    count = among.float().sum()
    return (flags & among).float().sum() / torch.clamp(count, min=1.0)


def _option_metrics(option: str, per_token: torch.Tensor, per_sequence: torch.Tensor | None,
                    response_mask: torch.Tensor, threshold: RejectionThreshold) -> dict[str, torch.Tensor]:
    """verl's `compute_rs_metrics` for one option; sequence options report over sequences with a token."""
    prefix, valid = f"rollout_rs_{option}", response_mask.bool()
    has_tokens = _has_tokens(response_mask)
    seq_values = per_sequence if per_sequence is not None else masked_mean(per_token, response_mask, axis=-1)
    seq_valid = seq_values[has_tokens]
    lower = threshold.lower if threshold.lower is not None else 0.0
    level_values = seq_valid if per_sequence is not None and seq_valid.numel() > 0 else None
    out = {f"{prefix}_mean": masked_mean(per_token, response_mask)}
    if level_values is not None:
        out[f"{prefix}_max"], out[f"{prefix}_min"] = level_values.max(), level_values.min()
        out[f"{prefix}_fraction_high"] = (level_values > threshold.upper).float().mean()
        low = (level_values < lower).float().mean() if threshold.lower is not None else per_token.new_zeros(())
    else:
        out[f"{prefix}_max"] = per_token.masked_fill(~valid, float("-inf")).max()
        out[f"{prefix}_min"] = per_token.masked_fill(~valid, float("inf")).min()
        out[f"{prefix}_fraction_high"] = masked_mean((per_token > threshold.upper).float(), response_mask)
        low = (masked_mean((per_token < lower).float(), response_mask) if threshold.lower is not None
               else per_token.new_zeros(()))
    out[f"{prefix}_fraction_low"] = low
    out[f"{prefix}_std"] = clamped_std(per_token, response_mask, lower, threshold.upper)
    out.update(_sequence_summary(prefix, seq_valid, threshold, per_token.new_zeros(())))
    return out


def clamped_std(values: torch.Tensor, mask: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """sqrt(max(E[x²] − E[x]², 0)) over valid tokens of x = clamp(values, low, high); 0 with < 2 tokens."""
    clamped = values.clamp(min=low, max=high)
    mean = masked_mean(clamped, mask)
    std = torch.sqrt(torch.clamp(masked_mean(clamped.square(), mask) - mean.square(), min=0.0))
    return torch.where(mask.sum() > 1, std, torch.zeros_like(std))


def _sequence_summary(prefix: str, seq_valid: torch.Tensor, threshold: RejectionThreshold,
                      zero: torch.Tensor) -> dict[str, torch.Tensor]:
    if seq_valid.numel() == 0:
        names = ("mean", "std", "max", "min", "max_deviation", "fraction_high", "fraction_low")
        return {f"{prefix}_seq_{name}": zero for name in names}
    out = {f"{prefix}_seq_mean": seq_valid.mean(),
           f"{prefix}_seq_std": seq_valid.std() if seq_valid.numel() > 1 else zero,
           f"{prefix}_seq_max": seq_valid.max(), f"{prefix}_seq_min": seq_valid.min(),
           f"{prefix}_seq_max_deviation": seq_valid.abs().max(),
           f"{prefix}_seq_fraction_high": (seq_valid > threshold.upper).float().mean()}
    if threshold.lower is not None:
        out[f"{prefix}_seq_fraction_low"] = (seq_valid < threshold.lower).float().mean()
    return out
