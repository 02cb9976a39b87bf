"""Pure tensor RL math with verl's names and numerics: advantages, policy/value losses, KL, aggregation.

Tensors and scalars in, tensors (and metric dicts) out; no config objects, no torch.distributed, no I/O.
"""

from hybridrl.algorithms.advantages import (
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
)
from hybridrl.algorithms.aggregate import LOSS_AGG_MODES, agg_loss
from hybridrl.algorithms.estimators import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimatorSpec,
    compute_advantage,
    get_advantage_estimator,
)
from hybridrl.algorithms.masked import masked_mean, masked_sum, masked_var, masked_whiten
from hybridrl.algorithms.policy_loss import (
    POLICY_LOSSES,
    compute_policy_loss,
    compute_policy_loss_gspo,
    get_policy_loss_fn,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "AdvantageEstimatorSpec",
    "agg_loss",
    "compute_advantage",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss",
    "compute_policy_loss_gspo",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "get_advantage_estimator",
    "get_policy_loss_fn",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]
