"""Pure tensor RL math with verl's names and numerics: advantages, policy/value losses, KL, aggregation,
rollout correction, on-policy distillation; and the registries of policy losses, advantage estimators and
distillation losses.

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
from hybridrl.algorithms.distillation import (
    DISTILLATION_LOSSES,
    DistillationLossParams,
    DistillationLossSettings,
    DistillationSettings,
    distillation_loss,
    get_distillation_loss_fn,
    get_distillation_loss_settings,
    register_distillation_loss,
)
from hybridrl.algorithms.estimators import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    AdvantageEstimatorSpec,
    AdvantageSettings,
    compute_advantage,
    get_adv_estimator_fn,
    get_advantage_estimator,
    register_adv_est,
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
    TokenStats,
    compute_entropy_from_logits,
    logprobs_and_entropy_from_hidden,
    logprobs_from_logits,
    sum_pi_squared_from_logits,
    token_stats_from_hidden,
)
from hybridrl.algorithms.loss_settings import ActorLossSettings, PolicyLossSettings
from hybridrl.algorithms.masked import masked_mean, masked_sum, masked_var, masked_whiten
from hybridrl.algorithms.outcome_advantages import (
    compute_gdpo_outcome_advantage,
    compute_gpg_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_opo_outcome_advantage,
)
from hybridrl.algorithms.policy_loss import (
    POLICY_LOSSES,
    PolicyLossSpec,
    get_policy_loss_fn,
    get_policy_loss_spec,
    register_policy_loss,
)
from hybridrl.algorithms.ppo_losses import compute_policy_loss, compute_policy_loss_gspo, compute_policy_loss_vanilla
from hybridrl.algorithms.rollout_correction import (
    RolloutCorrection,
    RolloutCorrectionSettings,
    compute_rollout_correction,
    compute_rollout_correction_and_rejection_mask,
    rollout_corr_metrics,
)
from hybridrl.algorithms.token_baseline import (
    compute_multi_turn_optimal_token_baseline_advantage,
    compute_optimal_token_baseline_advantage,
)
from hybridrl.algorithms.value_loss import compute_value_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "DISTILLATION_LOSSES",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "ActorLossSettings",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "AdvantageEstimatorSpec",
    "AdvantageSettings",
    "DistillationLossParams",
    "DistillationLossSettings",
    "DistillationSettings",
    "FixedKLController",
    "PolicyLossSettings",
    "PolicyLossSpec",
    "RolloutCorrection",
    "RolloutCorrectionSettings",
    "TokenStats",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage",
    "compute_entropy_from_logits",
    "compute_gae_advantage_return",
    "compute_gdpo_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "compute_opo_outcome_advantage",
    "compute_optimal_token_baseline_advantage",
    "compute_policy_loss",
    "compute_policy_loss_gspo",
    "compute_policy_loss_vanilla",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_rollout_correction",
    "compute_rollout_correction_and_rejection_mask",
    "compute_value_loss",
    "distillation_loss",
    "get_adv_estimator_fn",
    "get_distillation_loss_fn",
    "get_distillation_loss_settings",
    "get_advantage_estimator",
    "get_kl_controller",
    "get_policy_loss_fn",
    "get_policy_loss_spec",
    "kl_penalty",
    "logprobs_and_entropy_from_hidden",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "register_adv_est",
    "register_distillation_loss",
    "register_policy_loss",
    "rollout_corr_metrics",
    "sum_pi_squared_from_logits",
    "token_stats_from_hidden",
]
