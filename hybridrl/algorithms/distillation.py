"""On-policy distillation losses (verl/trainer/distillation/losses.py): the student, sampling its own responses,
is pulled towards a teacher's next-token distribution at every response position.

Two families, registered like the policy losses (`register_distillation_loss`, verl's decorator):

- single-sample estimators of the reverse KL KL(π_θ‖ν) on the sampled tokens (`use_estimator`): k1/kl, abs,
  k2/mse, k3/low_var_kl (Schulman's estimators, `kl.kl_penalty`), from the student's and the teacher's
  log-probs of each sampled token;
- the forward KL over the teacher's top-k tokens (`use_topk`, `forward_kl_topk`, GKD: Agarwal et al. 2024,
  arXiv 2306.13649): Σ_k ν_k (log ν_k − log π_θ,k), from the teacher's top-k log-probs and ids and the
  student's log-probs at those ids (`distill_topk.py`).

Every loss has verl's signature

    fn(config, distillation_config, model_output, data) -> (per-token losses (B, T), metrics)

with `config` the actor's ActorLossSettings, `distillation_config.distillation_loss` a DistillationLossParams,
`model_output` the student's forward (`log_probs` (B, T); the top-k modes also `distillation_losses`,
`student_mass`, `teacher_mass`, `overlap_count`, `overlap_token_advantage`, each (B, T)) and `data` the batch
(`response_mask`, `teacher_logprobs` (B, T) or (B, T, K), `teacher_ids` (B, T, K)). `distillation_loss` then
clamps, aggregates, or turns them into a policy-gradient reward (Thinking Machines' on-policy distillation,
2025: advantage = −sg(loss)), as verl does.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from hybridrl.algorithms.aggregate import agg_loss
from hybridrl.algorithms.kl import kl_penalty
from hybridrl.algorithms.loss_settings import ActorLossSettings
from hybridrl.algorithms.policy_loss import get_policy_loss_fn
from hybridrl.algorithms.records import VerlStyleRecord
from hybridrl.utils.external_modules import import_external_modules

Metrics = dict[str, torch.Tensor | float]
DistillationLossFn = Callable[..., tuple[torch.Tensor, Metrics]]


@dataclass(frozen=True)
class DistillationLossSettings(VerlStyleRecord):
    """What a registered loss needs from the teacher: its log-prob of each sampled token (`use_estimator`) or
    its top-k log-probs and ids (`use_topk`); exactly one."""

    names: tuple[str, ...]
    use_topk: bool = False
    use_estimator: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.names, str):
            object.__setattr__(self, "names", (self.names,))
        if self.use_topk == self.use_estimator:
            raise ValueError(f"a distillation loss uses exactly one of use_estimator, use_topk; got "
                             f"use_estimator={self.use_estimator}, use_topk={self.use_topk}")


@dataclass(frozen=True)
class DistillationLossParams(VerlStyleRecord):
    """verl's `distillation.distillation_loss` (DistillationLossConfig), defaults as in its distillation.yaml."""

    loss_mode: str = "k3"
    topk: int = 32
    use_task_rewards: bool = True
    distillation_loss_coef: float = 1.0
    loss_max_clamp: float | None = None
    log_prob_min_clamp: float | None = None
    use_policy_gradient: bool = False
    policy_loss_mode: str = "vanilla"
    clip_ratio: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2

    @property
    def loss_settings(self) -> DistillationLossSettings:
        return get_distillation_loss_settings(self.loss_mode)


@dataclass(frozen=True)
class DistillationSettings(VerlStyleRecord):
    """verl's DistillationConfig as its losses read it (`distillation_config.distillation_loss.topk`)."""

    distillation_loss: DistillationLossParams


DISTILLATION_LOSSES: dict[str, DistillationLossFn] = {}
DISTILLATION_SETTINGS: dict[str, DistillationLossSettings] = {}


def register_distillation_loss(loss_settings: DistillationLossSettings) -> Callable[[DistillationLossFn],
                                                                                    DistillationLossFn]:
    """Decorator (verl's): make `fn` the loss of `distillation.distillation_loss.loss_mode=<name>` for each of
    `loss_settings.names`. Another function under a taken name raises."""

    def decorator(fn: DistillationLossFn) -> DistillationLossFn:
        for name in loss_settings.names:
            existing = DISTILLATION_LOSSES.get(name)
            if existing is not None and existing is not fn:
                raise ValueError(f"distillation loss {name!r} is already registered ({existing.__module__}."
                                 f"{existing.__qualname__}); register yours under another name")
            DISTILLATION_LOSSES[name] = fn
            DISTILLATION_SETTINGS[name] = loss_settings
        return fn

    return decorator


def _lookup(loss_mode: str) -> str:
    if loss_mode not in DISTILLATION_LOSSES:
        import_external_modules()
    if loss_mode not in DISTILLATION_LOSSES:
        close = difflib.get_close_matches(loss_mode, list(DISTILLATION_LOSSES), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"distillation.distillation_loss.loss_mode={loss_mode!r} is not a distillation loss; {hint}"
                         f"choose one of {sorted(DISTILLATION_LOSSES)} (or register yours with "
                         "@register_distillation_loss in a module named in VERL_USE_EXTERNAL_MODULES)")
    return loss_mode


def get_distillation_loss_fn(loss_mode: str) -> DistillationLossFn:
    return DISTILLATION_LOSSES[_lookup(loss_mode)]


def get_distillation_loss_settings(loss_mode: str) -> DistillationLossSettings:
    return DISTILLATION_SETTINGS[_lookup(loss_mode)]


# ------------------------------------------------------------------ the registered losses
@register_distillation_loss(DistillationLossSettings(names=("forward_kl_topk",), use_topk=True))
def compute_forward_kl_topk(config: Any, distillation_config: DistillationSettings, model_output: Mapping[str, Any],
                            data: Mapping[str, Any]) -> tuple[torch.Tensor, Metrics]:
    """The forward KL over the teacher's top-k (computed with the student's forward: distill_topk.py), floored
    at 0 (both top-k masses are below 1, so the truncated sum can be negative), and the mass metrics:
    how much probability the teacher's top-k hold under the student and under the teacher, and the overlap
    of the two top-k sets (arXiv 2604.13016)."""
    mask = data["response_mask"].bool()
    losses = model_output["distillation_losses"]
    student_mass, teacher_mass = model_output["student_mass"][mask], model_output["teacher_mass"][mask]
    metrics: Metrics = {
        "distillation/student_mass": _mean(student_mass), "distillation/student_mass_min": _min(student_mass),
        "distillation/student_mass_max": _max(student_mass), "distillation/teacher_mass": _mean(teacher_mass),
        "distillation/teacher_mass_min": _min(teacher_mass), "distillation/teacher_mass_max": _max(teacher_mass),
    }
    overlap_count = model_output.get("overlap_count")
    if overlap_count is not None:
        topk = distillation_config.distillation_loss.topk
        metrics["distillation/overlap_ratio"] = _mean(overlap_count[mask].float()) / topk
        overlapping = mask & (overlap_count > 0)
        metrics["distillation/overlap_token_advantage"] = _mean(model_output["overlap_token_advantage"][overlapping])
    return losses.clamp_min(0.0), metrics


@register_distillation_loss(
    DistillationLossSettings(names=("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"), use_estimator=True))
def compute_distillation_loss_reverse_kl_estimator(config: Any, distillation_config: DistillationSettings,
                                                   model_output: Mapping[str, Any], data: Mapping[str, Any]
                                                   ) -> tuple[torch.Tensor, Metrics]:
    """A single-sample estimate of KL(π_θ‖ν) per sampled token (`kl_penalty` with the loss mode's estimator,
    the teacher in the reference's place); k1 can be negative, so the mean |loss| is logged as abs_loss."""
    student = model_output["log_probs"]
    teacher = data["teacher_logprobs"]
    teacher = teacher.squeeze(-1) if teacher.dim() == 3 else teacher
    if teacher.shape != student.shape:
        raise ValueError(f"teacher_logprobs {tuple(teacher.shape)} and the student's log_probs "
                         f"{tuple(student.shape)} must have one value per response token")
    losses = kl_penalty(student, teacher, distillation_config.distillation_loss.loss_mode)
    mask = data["response_mask"].bool()
    return losses, {"distillation/abs_loss": _mean(losses[mask].abs())}


# ------------------------------------------------------------------ clamp, aggregate or reward
def distillation_loss(config: ActorLossSettings, distillation_config: DistillationSettings,
                      model_output: Mapping[str, Any], data: Mapping[str, Any]) -> tuple[torch.Tensor, Metrics]:
    """(scalar distillation loss, metrics) of one batch, verl's `distillation_loss`.

    Per-token losses `l` (B, T) from the loss mode; distillation/loss_min, loss_max over the response tokens
    before clamping; `l` clamped to ±loss_max_clamp. Then either the supervised loss agg_loss(l) (GKD), or with
    use_policy_gradient the policy loss `policy_loss_mode` with advantages −sg(l), old log-probs
    `data["old_log_probs"]` and the distillation section's clip ratios, its metrics renamed `distillation/*`.
    `data["rollout_is_weights"]`, when present, weight that policy loss as they weight the task's.
    """
    params = distillation_config.distillation_loss
    losses, metrics = get_distillation_loss_fn(params.loss_mode)(config=config, distillation_config=distillation_config,
                                                                 model_output=model_output, data=data)
    mask = data["response_mask"]
    masked = losses.detach()[mask.bool()]
    metrics["distillation/loss_min"] = _min(masked)
    metrics["distillation/loss_max"] = _max(masked)
    if params.loss_max_clamp is not None:  # the lower clamp matters for k1, which can be negative
        losses = losses.clamp(min=-params.loss_max_clamp, max=params.loss_max_clamp)
    if not params.use_policy_gradient:
        return agg_loss(losses, mask, config.loss_agg_mode, config.loss_scale_factor), metrics
    pg_settings = ActorLossSettings(clip_ratio=params.clip_ratio, clip_ratio_low=params.clip_ratio_low,
                                    clip_ratio_high=params.clip_ratio_high, loss_agg_mode=config.loss_agg_mode,
                                    loss_scale_factor=config.loss_scale_factor)
    extra = {"rollout_is_weights": data["rollout_is_weights"]} if data.get("rollout_is_weights") is not None else {}
    loss, pg_metrics = get_policy_loss_fn(params.policy_loss_mode)(
        data["old_log_probs"], model_output["log_probs"], -losses.detach(), mask,
        loss_agg_mode=config.loss_agg_mode, config=pg_settings, **extra)
    metrics.update({f"distillation/{key.removeprefix('actor/')}": value for key, value in pg_metrics.items()})
    return loss, metrics


def _mean(values: torch.Tensor) -> torch.Tensor:
    """Mean of a 1-D selection; 0 when empty (a micro-batch with no response token, or no overlap)."""
    return values.float().mean() if values.numel() else values.new_zeros((), dtype=torch.float32)


def _min(values: torch.Tensor) -> torch.Tensor:
    return values.float().min() if values.numel() else values.new_zeros((), dtype=torch.float32)


def _max(values: torch.Tensor) -> torch.Tensor:
    return values.float().max() if values.numel() else values.new_zeros((), dtype=torch.float32)
