"""The knobs a policy loss reads, under verl's attribute names, so a loss written for verl runs unchanged.

verl passes its losses `config` (an ActorConfig) and they read `config.clip_ratio_low`,
`config.get("clip_ratio_c", 3.0)`, `config.policy_loss.clip_cov_ratio` and `**config.global_batch_info`;
these records answer the same reads with plain scalars (the actor builds one from its config section).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hybridrl.algorithms.records import VerlStyleRecord
from hybridrl.algorithms.rollout_correction import RolloutCorrectionSettings


@dataclass(frozen=True)
class PolicyLossSettings(VerlStyleRecord):
    """verl's `actor.policy_loss` (PolicyLossConfig), defaults as in verl's actor.yaml."""

    loss_mode: str = "vanilla"
    clip_cov_ratio: float = 0.0002  # clip_cov: fraction of tokens whose gradient is cut
    clip_cov_lb: float = 1.0  # clip_cov: covariance window lower bound
    clip_cov_ub: float = 5.0  # clip_cov: covariance window upper bound
    kl_cov_ratio: float = 0.0002  # kl_cov: fraction of tokens given the |log-ratio| penalty
    ppo_kl_coef: float = 0.1  # kl_cov: coefficient of that penalty
    dro_beta: float | None = None  # dro: quadratic log-ratio penalty (required for loss_mode=dro)
    rollout_correction: RolloutCorrectionSettings | None = None  # bypass_mode: IS / RS settings


@dataclass(frozen=True)
class ActorLossSettings(VerlStyleRecord):
    """The actor settings a policy loss reads (verl's ActorConfig names); `clip_ratio_low/high` fall back
    to `clip_ratio` when None, as in verl."""

    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0  # dual-clip constant (vanilla); truncation cap of the DPPO losses
    tau_pos: float = 1.0  # SAPO gate temperature, A > 0
    tau_neg: float = 1.05  # SAPO gate temperature, A <= 0
    loss_agg_mode: str = "token-mean"
    loss_scale_factor: float | None = None  # seq-mean-token-sum-norm divisor; None = padded length
    policy_loss: PolicyLossSettings = field(default_factory=PolicyLossSettings)

    @property
    def global_batch_info(self) -> dict[str, Any]:
        """`agg_loss` keywords, as verl's `**config.global_batch_info`. The counts stay local: the actor
        weights each micro-batch's loss by its share of the mini-batch (aggregate.micro_weight)."""
        return {"loss_scale_factor": self.loss_scale_factor}

    def clip_range(self) -> tuple[float, float]:
        """(ε_low, ε_high) with verl's fallback to `clip_ratio`."""
        low = self.clip_ratio if self.clip_ratio_low is None else self.clip_ratio_low
        high = self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high
        return low, high
