"""The advantage-estimator table keyed by verl's `algorithm.adv_estimator` strings, and one dispatcher.

An estimator is data: which phases it needs (critic, greedy baseline, groups) plus a function, so the
trainer reads flags instead of branching on names.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from hybridrl.algorithms import advantages as adv
from hybridrl.algorithms.advantages import GroupIndex


@dataclass(frozen=True)
class AdvantageEstimatorSpec:
    """`fn` has a verl-style signature; the dispatcher passes it the inputs its parameters name."""

    fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    needs_critic: bool = False  # needs `values` (GAE)
    needs_greedy_baseline: bool = False  # needs `reward_baselines` from a greedy rollout (ReMax)
    needs_groups: bool = False  # needs `index` (uid) and several responses per prompt


_GROUPED = dict(needs_groups=True)
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimatorSpec] = {
    "gae": AdvantageEstimatorSpec(adv.compute_gae_advantage_return, needs_critic=True),
    "grpo": AdvantageEstimatorSpec(adv.compute_grpo_outcome_advantage, **_GROUPED),
    "grpo_vectorized": AdvantageEstimatorSpec(adv.compute_grpo_outcome_advantage, **_GROUPED),
    "rloo": AdvantageEstimatorSpec(adv.compute_rloo_outcome_advantage, **_GROUPED),
    "rloo_vectorized": AdvantageEstimatorSpec(adv.compute_rloo_vectorized_outcome_advantage, **_GROUPED),
    "reinforce_plus_plus": AdvantageEstimatorSpec(adv.compute_reinforce_plus_plus_outcome_advantage),
    "reinforce_plus_plus_baseline": AdvantageEstimatorSpec(
        adv.compute_reinforce_plus_plus_baseline_outcome_advantage, **_GROUPED),
    "remax": AdvantageEstimatorSpec(adv.compute_remax_outcome_advantage, needs_greedy_baseline=True),
}


def get_advantage_estimator(adv_estimator: str) -> AdvantageEstimatorSpec:
    """The spec for `algorithm.adv_estimator`; an unknown name raises ValueError listing the valid ones."""
    if adv_estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(
            f"algorithm.adv_estimator={adv_estimator!r} is not supported; "
            f"choose one of {sorted(ADVANTAGE_ESTIMATORS)}"
        )
    return ADVANTAGE_ESTIMATORS[adv_estimator]


def compute_advantage(adv_estimator: str, *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                      index: GroupIndex | None = None, values: torch.Tensor | None = None,
                      reward_baselines: torch.Tensor | None = None, gamma: float = 1.0, lam: float = 1.0,
                      norm_adv_by_std_in_grpo: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `adv_estimator` on `(B, T)` inputs and return `(advantages, returns)`, both `(B, T)`."""
    spec = get_advantage_estimator(adv_estimator)
    _check_required_inputs(adv_estimator, spec, index, values, reward_baselines)
    available = dict(token_level_rewards=token_level_rewards, response_mask=response_mask, index=index,
                     values=values, reward_baselines=reward_baselines, gamma=gamma, lam=lam,
                     norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    accepted = inspect.signature(spec.fn).parameters
    return spec.fn(**{name: value for name, value in available.items() if name in accepted})


def _check_required_inputs(name: str, spec: AdvantageEstimatorSpec, index: object, values: object,
                           reward_baselines: object) -> None:
    if spec.needs_critic and values is None:
        raise ValueError(f"adv_estimator {name!r} needs critic `values`; enable the critic (critic.enable=True)")
    if spec.needs_greedy_baseline and reward_baselines is None:
        raise ValueError(f"adv_estimator {name!r} needs `reward_baselines` (the reward of a greedy response)")
    if spec.needs_groups and index is None:
        raise ValueError(f"adv_estimator {name!r} needs `index` (the per-prompt uid shared by its n responses)")
