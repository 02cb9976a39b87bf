"""What each advantage estimator needs from a run, torch-free: which roles start and which phases run.

The config rules (is a critic on? must rollout.n be > 1?) and the run plan read this table before anything
heavy is imported; the trainer reads the plan. Keys are verl's `algorithm.adv_estimator` names, the same as
the estimator registry's (`hybridrl.algorithms.ADVANTAGE_ESTIMATORS`): a test keeps the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EstimatorNeeds:
    critic: bool = False  # `values` from a critic: GAE (Schulman et al. 2016)
    greedy_baseline: bool = False  # the reward of one greedy response per prompt: ReMax (Li et al. 2023)
    groups: bool = False  # several responses per prompt, compared within their uid: GRPO, RLOO, ...
    sum_pi_squared: bool = False  # Σπ² per token from the actor's old-log-prob pass: the optimal token baseline


_GROUPED = EstimatorNeeds(groups=True)
_TOKEN_BASELINE = EstimatorNeeds(groups=True, sum_pi_squared=True)
ESTIMATOR_NEEDS: dict[str, EstimatorNeeds] = {
    "gae": EstimatorNeeds(critic=True),
    "grpo": _GROUPED,
    "grpo_vectorized": _GROUPED,
    "rloo": _GROUPED,
    "rloo_vectorized": _GROUPED,
    "reinforce_plus_plus": EstimatorNeeds(),
    "reinforce_plus_plus_baseline": _GROUPED,
    "remax": EstimatorNeeds(greedy_baseline=True),
    "opo": _GROUPED,
    "gpg": _GROUPED,
    "grpo_passk": _GROUPED,
    "gdpo": _GROUPED,
    "optimal_token_baseline": _TOKEN_BASELINE,
    "tir_optimal_token_baseline": _TOKEN_BASELINE,
}


def estimator_needs(name: str) -> EstimatorNeeds:
    """The needs of `algorithm.adv_estimator=name`; an unknown name needs nothing here (the config rules and the
    estimator registry report it, with the valid names)."""
    return ESTIMATOR_NEEDS.get(name, EstimatorNeeds())


def add_estimator_needs(name: str, needs: EstimatorNeeds) -> None:
    """Describe an estimator a user registered (@register_adv_est in a module of VERL_USE_EXTERNAL_MODULES); the
    trainer's preflight calls this from the registry's spec, since this table cannot import the registry."""
    ESTIMATOR_NEEDS.setdefault(name, needs)


def grouped_estimators() -> tuple[str, ...]:
    """The estimators whose advantage compares the responses of one prompt (rollout.n must be > 1)."""
    return tuple(name for name, needs in ESTIMATOR_NEEDS.items() if needs.groups)
