"""Which optional roles a config turns on (verl's need_critic / need_reference_policy)."""

from __future__ import annotations

from hybridrl.config.estimator_needs import estimator_needs
from hybridrl.config.schema import HybridRLConfig


def critic_enabled(cfg: HybridRLConfig) -> bool:
    """`critic.enable`, or when it is null: whether algorithm.adv_estimator needs values (gae; verl's rule)."""
    if cfg.critic.enable is not None:
        return cfg.critic.enable
    return estimator_needs(cfg.algorithm.adv_estimator).critic


def ref_enabled(cfg: HybridRLConfig) -> bool:
    """The reference policy is needed by the KL loss or the KL-in-reward penalty."""
    return cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward


def rollout_backend_name(cfg: HybridRLConfig, device_type: str) -> str:
    """`actor_rollout_ref.rollout.name` with `auto` made concrete: hybrid (our engine) on cuda, hf elsewhere, except
    in the asynchronous modes, which need the engine's request API (continuous batching, exact resumes)."""
    name = cfg.actor_rollout_ref.rollout.name
    if name != "auto":
        return name
    return "hybrid" if device_type == "cuda" or cfg.trainer.v1.trainer_mode != "sync" else "hf"
