"""Schema of `distillation.*`: verl's on-policy distillation (a teacher's log-probs as the KL target)."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting


@dataclass
class DistillationLossConfig:
    """How the teacher's log-probs enter the loss."""

    loss_mode: str = setting("k3", "KL estimator against the teacher (k1, k3, forward/reverse top-k ...).")
    topk: int = setting(32, "Teacher logits kept per token by the top-k loss modes.")
    use_task_rewards: bool = setting(True, "Also train on the task rewards (distillation loss added with distillation_loss_coef).")
    distillation_loss_coef: float = setting(1.0, "Weight of the distillation loss beside the task loss.")
    loss_max_clamp: float | None = setting(None, "Clamp of the distillation loss; null = none.")
    log_prob_min_clamp: float | None = setting(None, "Floor of log-probs in the loss; null = none.")
    use_policy_gradient: bool = setting(False, "Use the distillation signal as a reward for a policy loss.")
    policy_loss_mode: str = setting("vanilla", "Policy loss used with use_policy_gradient.")
    clip_ratio: float = setting(0.2, "PPO clip of that policy loss.")
    clip_ratio_low: float = setting(0.2, "Lower PPO clip of that policy loss.")
    clip_ratio_high: float = setting(0.2, "Upper PPO clip of that policy loss.")


@dataclass
class DistillationConfig:
    """On-policy distillation from teacher models (verl's August-2026 tree)."""

    enabled: bool = setting(False, "Distil from the teachers (not implemented in hybridrl yet: false only).")
    distillation_loss: DistillationLossConfig = section(DistillationLossConfig, "Distillation loss.")
    n_gpus_per_node: int = setting(8, "Devices per node of the teachers' pool.")
    nnodes: int = setting(0, "Nodes of the teachers' pool.")
    teacher_models: dict = setting({}, "Teachers by name (open dict: key, model_path, num_replicas, inference.*); "
                                       "verl's example entry is `teacher_model`.")
    teacher_key: str = setting("data_source", "Batch field that routes each row to its teacher.")
