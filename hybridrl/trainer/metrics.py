"""Step metrics with verl's names: data statistics, timing per phase and per token, throughput."""

from __future__ import annotations

import torch

from hybridrl.algorithms.variance_proxy import compute_variance_proxy_metrics
from hybridrl.logging.log import get_logger
from hybridrl.trainer.guards.nonfinite import nonfinite_batch_metrics
from hybridrl.utils.batch import Batch


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    if values.numel() == 0:
        return {}
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def _masked_values(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return tensor[mask.bool()]


def compute_data_metrics(batch: Batch, use_critic: bool, max_response_length: int) -> dict[str, float]:
    """verl's `compute_data_metrics`: scores, rewards, advantages, returns, values, lengths; and hybridrl's
    `training/nonfinite/<key>` counts where the chain has non-finite values (trainer/guards/nonfinite.py)."""
    mask = batch["response_mask"]
    # lengths from the attention mask (verl's too): rejection sampling may have taken tokens out of response_mask
    prompt_width = batch["prompts"].shape[1]
    response_length = batch["attention_mask"][:, prompt_width:].sum(-1).float()
    prompt_length = batch["attention_mask"][:, :prompt_width].sum(-1).float()
    metrics = nonfinite_batch_metrics(batch)
    metrics.update(_stats("critic/score", batch["token_level_scores"].sum(-1)))
    metrics.update(_stats("critic/rewards", batch["token_level_rewards"].sum(-1)))
    metrics.update(_stats("critic/advantages", _masked_values(batch["advantages"], mask)))
    metrics.update(_stats("critic/returns", _masked_values(batch["returns"], mask)))
    if use_critic:
        values = _masked_values(batch["values"], mask)
        returns = _masked_values(batch["returns"], mask)
        metrics.update(_stats("critic/values", values))
        metrics["critic/vf_explained_var"] = (1.0 - (returns - values).var() / (returns.var() + 1e-5)).item()
    metrics.update(_stats("response_length", response_length))
    metrics["response_length/clip_ratio"] = (response_length == max_response_length).float().mean().item()
    metrics.update(_stats("prompt_length", prompt_length))
    metrics["prompt_length/clip_ratio"] = (prompt_length == batch["prompts"].shape[1]).float().mean().item()
    metrics["response/aborted_ratio"] = (response_length == 0).float().mean().item()
    return metrics


def compute_gradient_variance_metrics(batch: Batch, gradient_norm: float | None) -> dict[str, float]:
    """verl's `variance_proxy/*` (algorithms/variance_proxy.py) for a batch that carries Σπ² per token
    (actor.calculate_sum_pi_squared), whatever the estimator; nothing otherwise."""
    if "sum_pi_squared" not in batch or "old_log_probs" not in batch:
        return {}
    return compute_variance_proxy_metrics(batch["advantages"], batch["response_mask"], batch["old_log_probs"],
                                          batch["sum_pi_squared"], batch.get("rollout_is_weights"), gradient_norm)


# Phases whose per-token time is divided by generated tokens; the others by all tokens (verl).
_PER_RESPONSE_TOKEN = ("gen",)
_PER_ALL_TOKENS = ("ref", "teacher", "values", "adv", "update_critic", "update_actor", "old_log_prob", "reward")


def compute_timing_metrics(batch: Batch, timings: dict[str, float]) -> dict[str, float]:
    num_response_tokens = batch["response_mask"].sum().item()
    num_tokens = batch["attention_mask"].sum().item()
    metrics = {f"timing_s/{name}": seconds for name, seconds in timings.items()}
    for name in _PER_RESPONSE_TOKEN + _PER_ALL_TOKENS:
        if name in timings:
            count = num_response_tokens if name in _PER_RESPONSE_TOKEN else num_tokens
            metrics[f"timing_per_token_ms/{name}"] = 1000.0 * timings[name] / max(count, 1)
    return metrics


def compute_throughput_metrics(batch: Batch, step_seconds: float, num_devices: int) -> dict[str, float]:
    """perf/throughput = (prompt + response tokens) / step time / devices, as verl and HybridFlow."""
    total = batch["attention_mask"].sum().item()
    return {"perf/total_num_tokens": float(total), "perf/time_per_step": step_seconds,
            "perf/throughput": total / max(step_seconds, 1e-9) / max(num_devices, 1)}

OLD_LOG_PROBS_FROM_UPDATE = ("the actor's update supplies the old log-probs (one epoch over one mini-batch: "
                             "actor_rollout_ref.actor.reuse_on_policy_log_prob), so the separate pass is skipped")


def record_skipped_phase(timings: dict[str, float], phase: str, reason: str, explained: set[str]) -> None:
    """`timing_s/<phase>` = 0 for a phase this step skips (dashboards expect the key); `reason` is logged the first
    time (`explained`: the phases already explained, the caller's to keep)."""
    timings[phase] = 0.0
    if phase not in explained:
        explained.add(phase)
        get_logger("hybridrl.trainer").info(f"timing_s/{phase} is 0: {reason}")


def compute_step_metrics(batch: Batch, timings: dict[str, float], metrics: dict[str, float], use_critic: bool,
                         max_response_length: int, num_devices: int) -> dict[str, float]:
    """A step's data, gradient-variance, timing and throughput metrics (`metrics`: what the step logged so far)."""
    return {**compute_data_metrics(batch, use_critic, max_response_length),
            **compute_gradient_variance_metrics(batch, metrics.get("actor/grad_norm")),
            **compute_timing_metrics(batch, timings),
            **compute_throughput_metrics(batch, timings["step"], num_devices)}
