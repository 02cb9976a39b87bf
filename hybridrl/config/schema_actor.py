"""Schema of `actor_rollout_ref.actor.*` and `actor_rollout_ref.ref.*` (verl HEAD defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting
from hybridrl.config.schema_model import (
    CheckpointConfig,
    FsdpConfig,
    OptimConfig,
    PolicyLossConfig,
    QatConfig,
    forward_only_fsdp,
)
from hybridrl.config.schema_profiler import RoleProfilerConfig

STRATEGIES = ("fsdp", "fsdp2", "megatron", "torchtitan", "veomni", "fsdp_turbo", "automodel", "mlite")  # verl's; FSDP runs here
ROLLOUT_N_DOC = "Responses per prompt, as the rollout's n (verl passes it to the role)."
MEGATRON_DOC = "verl's Megatron engine settings (open dict), read only with strategy=megatron, which hybridrl refuses."
VEOMNI_DOC = "verl's VeOmni engine settings (open dict), read only with strategy=veomni, which hybridrl refuses."
CHUNK_DOC = "Rows per entropy chunk (verl); no effect: the fused log-prob path sizes its own chunks."
PAD_DOC = "Pad micro-batches to fixed lengths (verl, for compiled kernels); no effect: hybridrl trims padding."
DEVICE_IDS_DOC = ("hybridrl: devices (global indices) this role runs on; null = the actor's devices (the actor's null: every device; the reward model's: the controller's GPU).")


@dataclass
class RouterReplayConfig:
    """MoE router replay."""

    mode: str = setting("disabled", "Router replay mode.", choices=("disabled", "R2", "R3"))
    record_file: str | None = setting(None, "Where routing decisions are recorded.")
    replay_file: str | None = setting(None, "Routing decisions to replay.")


@dataclass
class ActorConfig:
    """The trained policy. Batch sizes: mini counts prompts (x rollout.n inside), micro counts rows per device."""

    strategy: str = setting(
        "fsdp2",
        "hybridrl default fsdp2 (verl: fsdp); fsdp is accepted and means the same (FSDP2) here.",
        choices=STRATEGIES,
    )
    ppo_mini_batch_size: int = setting(256, "Prompts per optimizer step (global; x rollout.n responses).")
    ppo_micro_batch_size: int | None = setting(None, "Deprecated global micro batch (rows); per device = value // world size.")
    ppo_micro_batch_size_per_gpu: int | None = setting(None, "Rows per forward/backward on each device.")
    use_dynamic_bsz: bool = setting(False, "Form micro batches by a token budget instead of a row count.")
    ppo_max_token_len_per_gpu: int = setting(16384, "Real tokens (prompt+response) per micro batch (use_dynamic_bsz).")
    clip_ratio: float = setting(0.2, "PPO clip epsilon (fallback for clip_ratio_low/high).")
    clip_ratio_low: float = setting(0.2, "Lower clip epsilon.")
    clip_ratio_high: float = setting(0.2, "Upper clip epsilon (DAPO clip-higher: 0.28).")
    tau_pos: float = setting(1.0, "SAPO gate temperature for positive advantages.")
    tau_neg: float = setting(1.05, "SAPO gate temperature for negative advantages.")
    freeze_vision_tower: bool = setting(False, "Do not train the vision encoder; no effect (multimodal models and rows are refused).")
    policy_loss: PolicyLossConfig = section(PolicyLossConfig, "Policy loss variant.")
    clip_ratio_c: float = setting(3.0, "Dual-clip constant (> 1) for negative advantages.")
    loss_agg_mode: str = setting(
        "token-mean",
        "How token losses are averaged.",
        choices=("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
    )
    loss_scale_factor: float | None = setting(None, "Divisor for seq-mean-token-sum-norm; null = response length.")
    loss_agg_scope: str = setting(
        "mini_batch",
        "What loss_agg_mode's mean runs over: mini_batch = the whole mini-batch (all its micro-batches and ranks: "
        "the gradient does not depend on micro-batch sizes, dynamic batching, balancing or the rank count); "
        "micro_batch = each micro-batch's own mean, weighted by its rows (verl's legacy workers).",
        choices=("mini_batch", "micro_batch"),
    )
    entropy_coeff: float = setting(0.0, "Entropy bonus coefficient.")
    calculate_entropy: bool = setting(False, "Compute entropy even when entropy_coeff is 0; always on here (actor/entropy is logged every step).")
    use_kl_loss: bool = setting(False, "Add a KL-to-reference loss (GRPO style); needs the ref model.")
    use_prefix_grouper: bool = setting(
        False, "verl's PrefixGrouper (a GRPO group's shared prompt encoded once in the training forward): accepted; "
        "hybridrl's training forward computes each sequence whole, with identical log-probs and gradients and "
        "without the shared-prefix speed-up.")
    use_torch_compile: bool = setting(
        True, "torch.compile each decoder layer in place (regional; CUDA only, CPU stays eager): fuses norms, RoPE, "
        "SiLU-mul and residual adds in forward and backward; the first steps include compilation. With "
        "fsdp_config.use_torch_compile, either false runs eagerly.")
    kl_loss_coef: float = setting(0.001, "Weight of the KL loss.")
    kl_loss_type: str = setting("low_var_kl", "KL estimator: kl|k1|abs|mse|k2|low_var_kl|k3 (+ suffix: k2 gradient).")
    ppo_epochs: int = setting(1, "Passes over each batch.")
    reuse_on_policy_log_prob: bool = setting(
        True, "hybridrl: when the update is exactly on-policy (ppo_epochs=1, one mini-batch per step, no KL in "
        "the reward), take old log-probs from the update's own forward (detached; the ratio is 1 either way, as in "
        "TRL and verl's on_policy branch) and skip the old_log_prob pass. false: always run that pass.")
    shuffle: bool = setting(False, "Shuffle rows between mini batches.")
    data_loader_seed: int = setting(42, "Seed of the mini-batch shuffling.")
    grad_clip: float = setting(1.0, "Gradient-norm clip.")
    ulysses_sequence_parallel_size: int = setting(1, "Ulysses sequence parallel (same key under fsdp_config).")
    entropy_from_logits_with_chunking: bool = setting(False, "Compute entropy in row chunks; always so here (the fused log-prob path never holds a whole fp32 logits tensor).")
    entropy_checkpointing: bool = setting(False, "Recompute entropy in backward; no effect (the chunked log-prob path recomputes its chunks in backward).")
    use_remove_padding: bool = setting(
        True, "See model.use_remove_padding.", ref="${oc.select:actor_rollout_ref.model.use_remove_padding,false}"
    )
    use_fused_kernels: bool = setting(
        False, "See model.use_fused_kernels.", ref="${oc.select:actor_rollout_ref.model.use_fused_kernels,false}"
    )
    calculate_sum_pi_squared: bool = setting(
        False, "Compute sum_v pi(v)^2 per response token (under logits / temperature) in the old-log-prob forward, "
        "batch key sum_pi_squared; adv_estimator=optimal_token_baseline / tir_optimal_token_baseline need it. "
        "It keeps that forward running (no reuse_on_policy_log_prob shortcut): the advantages read it.")
    sum_pi_squared_checkpointing: bool = setting(
        False, "Recompute sum(pi^2) in backward (verl); no effect here: it comes from the no-grad old-log-prob "
        "forward, one chunk of logits at a time.")
    router_replay: RouterReplayConfig = section(RouterReplayConfig, "MoE router replay.")
    optim: OptimConfig = section(OptimConfig, "Actor optimizer.")
    fsdp_config: FsdpConfig = section(FsdpConfig, "Actor FSDP settings.")
    checkpoint: CheckpointConfig = section(CheckpointConfig, "Actor checkpoint contents.")
    device_ids: list[int] | None = setting(None, DEVICE_IDS_DOC)
    rollout_n: int = setting(1, ROLLOUT_N_DOC, ref="${oc.select:actor_rollout_ref.rollout.n,1}")
    entropy_from_logits_chunk_size: int = setting(2048, CHUNK_DOC)
    pad_to_length: bool = setting(False, PAD_DOC)
    qat: QatConfig = section(QatConfig, "Quantization-aware training of the actor.")
    profiler: RoleProfilerConfig = section(RoleProfilerConfig, "Profiling of this role (verl).")
    megatron: dict = setting({}, MEGATRON_DOC)
    veomni: dict = setting({}, VEOMNI_DOC)


@dataclass
class RefConfig:
    """The frozen reference policy (needed by use_kl_loss or algorithm.use_kl_in_reward)."""

    strategy: str = setting(
        "fsdp2", "Engine strategy.", ref="${actor_rollout_ref.actor.strategy}", choices=STRATEGIES
    )
    use_torch_compile: bool = setting(
        True, "torch.compile the reference's decoder layers (see actor.use_torch_compile).",
        ref="${actor_rollout_ref.actor.use_torch_compile}")
    log_prob_micro_batch_size: int | None = setting(None, "Deprecated global micro batch (rows) for ref log-probs.")
    log_prob_micro_batch_size_per_gpu: int | None = setting(None, "Rows per ref forward on each device.")
    log_prob_use_dynamic_bsz: bool = setting(
        False, "Token-budget micro batches for ref log-probs.", ref="${actor_rollout_ref.actor.use_dynamic_bsz}"
    )
    log_prob_max_token_len_per_gpu: int = setting(
        16384, "Token budget per micro batch.", ref="${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}"
    )
    fsdp_config: FsdpConfig = section(forward_only_fsdp, "Ref FSDP settings.")
    ulysses_sequence_parallel_size: int = setting(
        1, "Ulysses sequence parallel.", ref="${actor_rollout_ref.actor.ulysses_sequence_parallel_size}"
    )
    entropy_from_logits_with_chunking: bool = setting(False, "Compute entropy in row chunks; always so here (the fused log-prob path never holds a whole fp32 logits tensor).")
    entropy_checkpointing: bool = setting(False, "Recompute entropy in backward; no effect (the chunked log-prob path recomputes its chunks in backward).")
    device_ids: list[int] | None = setting(None, DEVICE_IDS_DOC)
    rollout_n: int = setting(1, ROLLOUT_N_DOC, ref="${oc.select:actor_rollout_ref.rollout.n,1}")
    entropy_from_logits_chunk_size: int = setting(2048, CHUNK_DOC)
    pad_to_length: bool = setting(False, PAD_DOC, ref="${oc.select:actor_rollout_ref.actor.pad_to_length,false}")
    router_replay: RouterReplayConfig = section(RouterReplayConfig, "MoE router replay of the reference.")
    profiler: RoleProfilerConfig = section(RoleProfilerConfig, "Profiling of this role (verl).")
    megatron: dict = setting({}, MEGATRON_DOC)
    veomni: dict = setting({}, VEOMNI_DOC)
