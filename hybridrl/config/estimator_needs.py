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


_GROUPED = EstimatorNeeds(groups=True)
ESTIMATOR_NEEDS: dict[str, EstimatorNeeds] = {
    "gae": EstimatorNeeds(critic=True),
    "grpo": _GROUPED,
    "grpo_vectorized": _GROUPED,
    "rloo": _GROUPED,
    "rloo_vectorized": _GROUPED,
    "reinforce_plus_plus": EstimatorNeeds(),
    "reinforce_plus_plus_baseline": _GROUPED,
    "remax": EstimatorNeeds(greedy_baseline=True),
}


def estimator_needs(name: str) -> EstimatorNeeds:
    """The needs of `algorithm.adv_estimator=name`; an unknown name needs nothing here (the config rules and the
    estimator registry report it, with the valid names)."""
    return ESTIMATOR_NEEDS.get(name, EstimatorNeeds())


def grouped_estimators() -> tuple[str, ...]:
    """The estimators whose advantage compares the responses of one prompt (rollout.n must be > 1)."""
    return tuple(name for name, needs in ESTIMATOR_NEEDS.items() if needs.groups)
