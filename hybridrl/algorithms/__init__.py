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
from hybridrl.algorithms.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    get_kl_controller,
    kl_penalty,
)
from hybridrl.algorithms.logprob import (
    compute_entropy_from_logits,
    logprobs_and_entropy_from_hidden,
    logprobs_from_logits,
)
from hybridrl.algorithms.masked import masked_mean, masked_sum, masked_var, masked_whiten
from hybridrl.algorithms.policy_loss import (
    POLICY_LOSSES,
    compute_policy_loss,
    compute_policy_loss_gspo,
    get_policy_loss_fn,
)
from hybridrl.algorithms.value_loss import compute_value_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "AdvantageEstimatorSpec",
    "FixedKLController",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage",
    "compute_entropy_from_logits",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss",
    "compute_policy_loss_gspo",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_value_loss",
    "get_advantage_estimator",
    "get_kl_controller",
    "get_policy_loss_fn",
    "kl_penalty",
    "logprobs_and_entropy_from_hidden",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]
