"""Schema of `distillation.*`: verl's on-policy distillation (a teacher's log-probs as the KL target)."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting


@dataclass
class DistillationLossConfig:
    """How the teacher's log-probs enter the actor's loss (algorithms/distillation.py)."""

    loss_mode: str = setting("k3", "forward_kl_topk (forward KL over the teacher's top-k), or a single-sample "
                             "estimator of KL(student||teacher) on the sampled tokens: k1/kl, abs, k2/mse, k3/low_var_kl "
                             "(or a @register_distillation_loss name).")
    topk: int = setting(32, "Teacher log-probs kept per token by the top-k loss modes.")
    use_chunked_topk: bool = setting(False, "verl: stream the top-k passes in chunks of chunked_topk_chunk_size "
                                     "tokens (long context). hybridrl always chunks them; true: that chunk size "
                                     "instead of ~1 GiB of fp32 logits per chunk.")
    chunked_topk_chunk_size: int = setting(4096, "Tokens per chunk of the top-k passes with use_chunked_topk=true.")
    use_task_rewards: bool = setting(True, "Also train on the task rewards (policy loss + distillation_loss_coef x "
                                     "distillation loss); false: the distillation loss alone.")
    distillation_loss_coef: float = setting(1.0, "Weight of the distillation loss beside the task loss (1 when "
                                            "use_task_rewards=false).")
    loss_max_clamp: float | None = setting(None, "Per-token distillation losses clamped to +-this; null = none.")
    log_prob_min_clamp: float | None = setting(None, "Floor of the top-k log-probs (student and teacher) in the "
                                               "top-k loss; null = none.")
    use_policy_gradient: bool = setting(False, "The negative per-token distillation loss as the advantage of "
                                        "policy_loss_mode (use with k1); false: backpropagate the loss itself.")
    policy_loss_mode: str = setting("vanilla", "Policy loss used with use_policy_gradient.")
    clip_ratio: float = setting(0.2, "PPO clip of that policy loss.")
    clip_ratio_low: float = setting(0.2, "Lower PPO clip of that policy loss.")
    clip_ratio_high: float = setting(0.2, "Upper PPO clip of that policy loss.")


@dataclass
class DistillationConfig:
    """On-policy distillation from teacher models (verl's August-2026 tree; docs/algorithms.md)."""

    enabled: bool = setting(False, "Distil from the teachers: their log-probs on the student's responses enter the "
                                   "actor's loss (each teacher a forward-only role on the trainer's devices).")
    distillation_loss: DistillationLossConfig = section(DistillationLossConfig, "Distillation loss.")
    n_gpus_per_node: int = setting(8, "verl's teacher pool (devices per node); hybridrl: teachers share the "
                                      "trainer's devices, so no effect (named in a notice).")
    nnodes: int = setting(0, "verl's teacher pool (nodes); no effect in hybridrl (named in a notice).")
    teacher_models: dict = setting({}, "Teachers by name: {key, model_path, num_replicas, inference.*}; one entry "
                                       "(verl's `teacher_model`) serves every row, several are routed by key. "
                                       "num_replicas and inference.* size verl's servers: no effect here but "
                                       "inference.max_model_len (checked).")
    teacher_key: str = setting("data_source", "Row field whose value picks each row's teacher (several teachers).")
