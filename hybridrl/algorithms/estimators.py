"""The advantage-estimator table keyed by verl's `algorithm.adv_estimator` strings, its registry API
(verl's `register_adv_est` / `get_adv_estimator_fn` / `AdvantageEstimator`) and one dispatcher.

An estimator is data: which inputs and phases it needs (critic, greedy baseline, groups, Σπ², reward
components) plus a function, so the trainer reads flags instead of branching on names. A user estimator
registers into the same table:

    from hybridrl.algorithms import register_adv_est

    @register_adv_est("my_estimator", needs_groups=True)
    def my_estimator(token_level_rewards, response_mask, index, config=None, **kwargs):
        ...  # return (advantages, returns), both (B, T)

(a module named in VERL_USE_EXTERNAL_MODULES is imported before the first lookup: hybridrl/utils/
external_modules.py). The dispatcher passes each function the inputs its parameters name (all of them to
a `**kwargs` function); `config` is an AdvantageSettings with verl's AlgoConfig names (`config.gamma`,
`config.get("norm_adv_by_std_in_grpo")`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

from hybridrl.algorithms import advantages as adv
from hybridrl.algorithms import outcome_advantages as outcome
from hybridrl.algorithms import token_baseline as otb
from hybridrl.algorithms.advantages import GroupIndex
from hybridrl.algorithms.records import VerlStyleRecord
from hybridrl.utils.external_modules import import_external_modules

EstimatorFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


class AdvantageEstimator(str, Enum):
    """verl's enum of the built-in names (`AdvantageEstimator.GRPO == "grpo"`)."""

    GAE = "gae"
    GRPO = "grpo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"
    OPO = "opo"
    GRPO_PASSK = "grpo_passk"
    GPG = "gpg"
    RLOO_VECTORIZED = "rloo_vectorized"
    GRPO_VECTORIZED = "grpo_vectorized"
    OPTIMAL_TOKEN_BASELINE = "optimal_token_baseline"
    TIR_OPTIMAL_TOKEN_BASELINE = "tir_optimal_token_baseline"
    GDPO = "gdpo"


@dataclass(frozen=True)
class AdvantageEstimatorSpec:
    """`fn` has a verl-style signature; the dispatcher passes it the inputs its parameters name."""

    fn: EstimatorFn
    needs_critic: bool = False  # needs `values` (GAE)
    needs_greedy_baseline: bool = False  # needs `reward_baselines` from a greedy rollout (ReMax)
    needs_groups: bool = False  # needs `index` (uid) and several responses per prompt
    needs_sum_pi_squared: bool = False  # needs `sum_pi_squared` and `old_log_probs` from the actor (OTB)
    needs_reward_components: bool = False  # needs per-row reward components named by gdpo_reward_keys (GDPO)


@dataclass(frozen=True)
class AdvantageSettings(VerlStyleRecord):
    """The `config` an estimator may read (verl's AlgoConfig names)."""

    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    gdpo_reward_keys: tuple[str, ...] | None = None
    gdpo_reward_weights: tuple[float, ...] | None = None


_GROUPED = dict(needs_groups=True)
_OTB = dict(needs_groups=True, needs_sum_pi_squared=True)
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
    "opo": AdvantageEstimatorSpec(outcome.compute_opo_outcome_advantage, **_GROUPED),
    "gpg": AdvantageEstimatorSpec(outcome.compute_gpg_outcome_advantage, **_GROUPED),
    "grpo_passk": AdvantageEstimatorSpec(outcome.compute_grpo_passk_outcome_advantage, **_GROUPED),
    "gdpo": AdvantageEstimatorSpec(outcome.compute_gdpo_outcome_advantage, needs_groups=True,
                                   needs_reward_components=True),
    "optimal_token_baseline": AdvantageEstimatorSpec(otb.compute_optimal_token_baseline_advantage, **_OTB),
    "tir_optimal_token_baseline": AdvantageEstimatorSpec(
        otb.compute_multi_turn_optimal_token_baseline_advantage, **_OTB),
}
BUILTIN_ADVANTAGE_ESTIMATORS = tuple(ADVANTAGE_ESTIMATORS)


def _name(name_or_enum: str | Enum) -> str:
    return name_or_enum.value if isinstance(name_or_enum, Enum) else name_or_enum


def register_adv_est(name_or_enum: str | AdvantageEstimator, *, needs_critic: bool = False,
                     needs_greedy_baseline: bool = False, needs_groups: bool = False,
                     needs_sum_pi_squared: bool = False) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator: register `fn` as `algorithm.adv_estimator=<name>` (verl's decorator; the keyword flags
    say which phases it needs). Registering another function under a taken name raises, as in verl."""
    name = _name(name_or_enum)

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        existing = ADVANTAGE_ESTIMATORS.get(name)
        if existing is not None and existing.fn is not fn:
            raise ValueError(f"adv_estimator {name!r} is already registered ({existing.fn.__module__}."
                             f"{existing.fn.__qualname__}); register yours under another name")
        ADVANTAGE_ESTIMATORS[name] = AdvantageEstimatorSpec(
            fn, needs_critic=needs_critic, needs_greedy_baseline=needs_greedy_baseline, needs_groups=needs_groups,
            needs_sum_pi_squared=needs_sum_pi_squared)
        return fn

    return decorator


def get_advantage_estimator(adv_estimator: str | AdvantageEstimator) -> AdvantageEstimatorSpec:
    """The spec for `algorithm.adv_estimator`; an unknown name raises ValueError listing the valid ones."""
    name = _name(adv_estimator)
    if name not in ADVANTAGE_ESTIMATORS:
        import_external_modules()
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(
            f"algorithm.adv_estimator={name!r} is not supported; choose one of {sorted(ADVANTAGE_ESTIMATORS)} "
            "(or register yours with @register_adv_est in a module named in VERL_USE_EXTERNAL_MODULES)")
    return ADVANTAGE_ESTIMATORS[name]


def registered_spec(name: str) -> AdvantageEstimatorSpec | None:
    """The spec registered under `name` (user modules of VERL_USE_EXTERNAL_MODULES imported first), or None."""
    if name not in ADVANTAGE_ESTIMATORS:
        import_external_modules()
    return ADVANTAGE_ESTIMATORS.get(name)


def get_adv_estimator_fn(name_or_enum: str | AdvantageEstimator) -> EstimatorFn:
    """verl's lookup: the estimator function for a name or AdvantageEstimator member."""
    return get_advantage_estimator(name_or_enum).fn


def compute_advantage(adv_estimator: str | AdvantageEstimator, *, token_level_rewards: torch.Tensor,
                      response_mask: torch.Tensor, index: GroupIndex | None = None,
                      values: torch.Tensor | None = None, reward_baselines: torch.Tensor | None = None,
                      gamma: float = 1.0, lam: float = 1.0, norm_adv_by_std_in_grpo: bool = True,
                      old_log_probs: torch.Tensor | None = None, sum_pi_squared: torch.Tensor | None = None,
                      rollout_is_weights: torch.Tensor | None = None,
                      reward_extra_info: Mapping[str, Sequence[Any]] | None = None,
                      gdpo_reward_keys: Sequence[str] | None = None,
                      gdpo_reward_weights: Sequence[float] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `adv_estimator` on `(B, T)` inputs and return `(advantages, returns)`, both `(B, T)`.

    `norm_adv_by_std_in_grpo` reaches every estimator that takes it (verl's trainer passes it to `grpo` only,
    so its grpo_vectorized and gdpo always divide by the std). `reward_extra_info`: the reward function's
    per-row extra values (GDPO's components).
    """
    spec = get_advantage_estimator(adv_estimator)
    keys = tuple(gdpo_reward_keys) if gdpo_reward_keys else None
    _check_required_inputs(_name(adv_estimator), spec, index, values, reward_baselines,
                           (old_log_probs, sum_pi_squared), (reward_extra_info, keys))
    settings = AdvantageSettings(gamma=gamma, lam=lam, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
                                 gdpo_reward_keys=keys,
                                 gdpo_reward_weights=tuple(gdpo_reward_weights) if gdpo_reward_weights else None)
    available = dict(token_level_rewards=token_level_rewards, response_mask=response_mask, index=index,
                     values=values, reward_baselines=reward_baselines, gamma=gamma, lam=lam,
                     norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, old_log_probs=old_log_probs,
                     sum_pi_squared=sum_pi_squared, rollout_is_weights=rollout_is_weights,
                     reward_components=reward_extra_info, gdpo_reward_keys=keys,
                     gdpo_reward_weights=settings.gdpo_reward_weights, config=settings)
    parameters = inspect.signature(spec.fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return spec.fn(**available)
    return spec.fn(**{name: value for name, value in available.items() if name in parameters})


def _check_required_inputs(name: str, spec: AdvantageEstimatorSpec, index: object, values: object,
                           reward_baselines: object, actor_stats: tuple[object, object],
                           components: tuple[object, object]) -> None:
    if spec.needs_critic and values is None:
        raise ValueError(f"adv_estimator {name!r} needs critic `values`; enable the critic (critic.enable=True)")
    if spec.needs_greedy_baseline and reward_baselines is None:
        raise ValueError(f"adv_estimator {name!r} needs `reward_baselines` (the reward of a greedy response)")
    if spec.needs_groups and index is None:
        raise ValueError(f"adv_estimator {name!r} needs `index` (the per-prompt uid shared by its n responses)")
    if spec.needs_sum_pi_squared and any(stat is None for stat in actor_stats):
        raise ValueError(f"adv_estimator {name!r} needs `old_log_probs` and `sum_pi_squared` (Σπ² per token) from "
                         "the actor; set actor_rollout_ref.actor.calculate_sum_pi_squared=true")
    if spec.needs_reward_components and any(part is None for part in components):
        raise ValueError(f"adv_estimator {name!r} needs the reward components named by algorithm.gdpo_reward_keys "
                         "(returned by compute_score in its dict), e.g. +algorithm.gdpo_reward_keys='[acc,format]'")
