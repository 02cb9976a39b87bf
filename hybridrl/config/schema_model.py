"""Schema of the building blocks shared by roles: HF model, optimizer, FSDP engine, checkpoint contents."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting


@dataclass
class FusedKernelOptions:
    """Options of the fused log-prob kernels."""

    impl_backend: str = setting("torch", "Fused kernel backend; no effect (hybridrl's fused log-prob kernels are Triton on CUDA, torch on CPU).", choices=("torch", "triton"))


@dataclass
class TiledMlpConfig:
    """Tiled MLP (memory saving for long sequences)."""

    enabled: bool = setting(False, "Compute the MLP in sequence tiles.")
    num_shards: int = setting(4, "Number of sequence tiles.")


@dataclass
class MtpConfig:
    """Multi-token prediction heads."""

    enable: bool = setting(False, "Load the model's multi-token-prediction layers.")
    enable_train: bool = setting(False, "Train the MTP layers.")
    enable_rollout: bool = setting(False, "Use MTP for speculative decoding.")
    detach_encoder: bool = setting(False, "Stop gradients from the MTP loss into the trunk.")
    mtp_loss_scaling_factor: float = setting(0.1, "Weight of the MTP loss.")
    speculative_algorithm: str = setting("EAGLE", "Speculative decoding algorithm of the rollout with MTP.")
    speculative_num_steps: int = setting(3, "Speculative steps per decode.")
    speculative_eagle_topk: int = setting(1, "EAGLE top-k.")
    speculative_num_draft_tokens: int = setting(4, "Draft tokens per step.")
    method: str = setting("mtp", "Speculative method name (vLLM).")
    num_speculative_tokens: int = setting(1, "Speculative tokens (vLLM).")


@dataclass
class QatConfig:
    """Quantization-aware training (verl's August-2026 tree)."""

    enable: bool = setting(False, "Train with fake-quantized weights (not implemented in hybridrl: false only).")
    mode: str = setting("w4a16", "Quantization scheme.")
    group_size: int = setting(16, "Quantization group size.")
    ignore_patterns: list[str] = setting(["lm_head", "embed_tokens", "re:.*mlp.gate$"], "Modules left unquantized.")
    activation_observer: str = setting("static_minmax", "Activation range observer.")
    quantization_config_path: str | None = setting(None, "Quantization config file.")


@dataclass
class ModelConfig:
    """The actor's HF model (also used by ref and rollout)."""

    path: str = setting("~/models/deepseek-llm-7b-chat", "Local HF model directory (or hub id already in the cache).")
    hf_config_path: str | None = setting(None, "Read config.json from here instead of `path`.")
    tokenizer_path: str | None = setting(None, "Tokenizer directory; null = `path`.")
    use_shm: bool = setting(False, "Copy the model to /dev/shm before loading.")
    trust_remote_code: bool = setting(False, "Allow model code from the model repo.")
    custom_chat_template: str | None = setting(None, "Jinja chat template replacing the tokenizer's.")
    external_lib: str | None = setting(None, "Module imported before loading (registers custom models/tokenizers).")
    override_config: dict = setting({}, "Entries merged into the HF config, e.g. attn_implementation.")
    enable_gradient_checkpointing: bool = setting(True, "Recompute activations in backward to save memory.")
    enable_activation_offload: bool = setting(
        False, "Keep what the actor's training forward saves for backward in host memory (pinned, copied "
        "asynchronously; parameters stay): with gradient checkpointing each decoder layer's input, without it every "
        "activation. Less device memory for PCIe traffic; the old/ref log-prob forwards save nothing."
    )
    fp32_residual_stream: bool = setting(
        True, "hybridrl: bf16/fp16 forwards keep the residual stream in fp32, in the trainer (actor, reference) and the "
        "rollout engine alike, which narrows their log-prob gap; costs activation memory in training (saved layer "
        "inputs in fp32). false = HF's plain bf16 stream."
    )
    batch_invariant: bool = setting(
        False, "hybridrl: the rollout engine and the trainer (actor, reference) compute every token the same way, with "
        "batch-invariant Triton kernels for the linear layers, attention and token log-probs, so the log-prob the "
        "rollout records equals the trainer's old_log_prob bit for bit (rollout/trainer mismatch 0; vLLM's "
        "VLLM_BATCH_INVARIANT, slime's true on-policy). Costs training speed (no torch.compile, Triton GEMMs, attention "
        "twice for its gradient): on one H200 at the Qwen2.5-0.5B shape a GRPO step measured 1.47x the default's "
        "(docs/config.md), the decode step 1.04x (1.00x at 7B). Needs CUDA, fp32_residual_stream=true and the hybrid "
        "engine without tensor parallelism."
    )
    use_remove_padding: bool = setting(
        True, "Drop columns that are padding in every row of a micro batch before the forward (no varlen packing)."
    )
    lora_rank: int = setting(0, "LoRA rank; 0 = full fine-tuning.")
    lora_alpha: int = setting(16, "LoRA alpha (scale = alpha / rank).")
    target_modules: str | list[str] = setting("all-linear", "Modules that get LoRA adapters.")
    exclude_modules: str | list[str] | None = setting(None, "Modules excluded from LoRA.")
    lora_adapter_path: str | None = setting(None, "Start from this saved LoRA adapter.")
    use_liger: bool = setting(False, "Patch the model with Liger kernels.")
    use_fused_kernels: bool = setting(
        False, "Accepted either way: hybridrl's log-prob path is always chunked (never materialises full-vocab fp32)."
    )
    fused_kernel_options: FusedKernelOptions = section(FusedKernelOptions, "Fused kernel options.")
    tiled_mlp: TiledMlpConfig = section(TiledMlpConfig, "Tiled MLP options.")
    mtp: MtpConfig = section(MtpConfig, "Multi-token prediction options.")
    lora: dict = setting({}, "verl's Megatron LoRA settings (type, rank, alpha, target_modules of Megatron layers; open "
                             "dict), read only with strategy=megatron; FSDP LoRA is lora_rank / lora_alpha / target_modules.")


@dataclass
class OptimConfig:
    """Optimizer and LR schedule (one scheduler step per update call)."""

    optimizer: str = setting("AdamW", "Optimizer class name inside optimizer_impl (betas go to names containing 'adam').")
    optimizer_impl: str = setting("torch.optim", "Module holding the optimizer class (imported by name, e.g. bitsandbytes.optim).")
    lr: float = setting(1e-6, "Peak learning rate.")
    lr_warmup_steps_ratio: float = setting(0.0, "Warmup steps as a fraction of total steps (used when lr_warmup_steps <= 0).")
    total_training_steps: int = setting(-1, "Set by the trainer from the data size and total_epochs.")
    weight_decay: float = setting(0.01, "Decoupled weight decay.")
    lr_warmup_steps: int = setting(-1, "Warmup steps; <= 0 = use lr_warmup_steps_ratio.")
    betas: list[float] = setting([0.9, 0.999], "Adam betas.")
    clip_grad: float = setting(1.0, "Gradient-norm clip: a second spelling of the role's grad_clip (set one).")
    min_lr_ratio: float = setting(0.0, "Cosine schedule floor as a fraction of lr.")
    num_cycles: float = setting(0.5, "Cosine schedule cycles.")
    lr_scheduler_type: str = setting(
        "constant", "LR schedule after warmup (older spelling: warmup_style).", choices=("constant", "cosine")
    )
    override_optimizer_config: dict | None = setting(None, "Extra optimizer constructor kwargs.")
    zero_indexed_step: bool = setting(True, "verl's scheduler counts steps from 0 (the first step at the warmup's first "
                                            "learning rate); hybridrl's schedule does too (true only).")


@dataclass
class WrapPolicyConfig:
    """FSDP wrapping policy."""

    min_num_params: int = setting(0, "Wrap modules with at least this many parameters; 0 = per transformer layer.")


@dataclass
class FsdpConfig:
    """FSDP engine settings of one role."""

    wrap_policy: WrapPolicyConfig = section(WrapPolicyConfig, "FSDP wrapping policy.")
    param_offload: bool = setting(False, "Keep parameters on CPU between phases.")
    optimizer_offload: bool = setting(False, "Keep optimizer state on CPU between updates.")
    offload_policy: bool = setting(
        False, "FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer state live on the CPU (each unit copied "
        "to the device for its forward/backward, the optimizer stepping on the CPU); param_offload / "
        "optimizer_offload then have nothing to move. One device in the trainer's process (no process group): "
        "param_offload + optimizer_offload instead, with a warning."
    )
    reshard_after_forward: bool = setting(True, "FSDP2: free each unit's gathered parameters after forward (false: "
                                          "keep them for backward, no second all-gather, more memory).")
    fsdp_size: int = setting(-1, "Shard group size: -1 = all of the role's ranks; a divisor k of them = hybrid "
                                 "sharding (HSDP: shard within groups of k, replicate across groups); k=1 keeps a whole "
                                 "copy per rank without FSDP: gradients averaged by all-reduces overlapping the last backward.")
    forward_prefetch: bool = setting(False, "FSDP1 only: no effect under FSDP2, which prefetches by itself (as verl's fsdp2).")
    model_dtype: str = setting("fp32", "Master weight dtype (parameters, gradients, optimizer updates).")
    use_orig_params: bool = setting(False, "FSDP1 only: no effect under FSDP2 (as verl's fsdp2).")
    seed: int = setting(42, "Engine seed.")
    full_determinism: bool = setting(False, "Deterministic kernels (not implemented: false only).")
    ulysses_sequence_parallel_size: int = setting(1, "Ulysses sequence-parallel size.")
    entropy_from_logits_with_chunking: bool = setting(False, "Compute entropy in row chunks; always so here (the fused log-prob path never holds a whole fp32 logits tensor).")
    use_torch_compile: bool = setting(True, "This role's regional torch.compile of decoder layers on CUDA (the actor "
                                      "and ref also need their own use_torch_compile; either false turns it off).")
    entropy_checkpointing: bool = setting(False, "Recompute entropy in backward; no effect (the chunked log-prob path recomputes its chunks in backward).")
    forward_only: bool = setting(False, "The role never trains (verl sets it for ref); no effect here: the reference role builds no optimizer.")
    strategy: str = setting("fsdp", "Engine strategy of this role (fsdp and fsdp2 both mean FSDP2 here).")
    dtype: str = setting("bfloat16", "Compute dtype on GPU (mixed precision); CPU computes in model_dtype.")
    mixed_precision: dict = setting(
        {}, "param_dtype (compute, also on CPU), reduce_dtype (gradient reduce; fp32), buffer_dtype (checked only)."
    )
    entropy_from_logits_chunk_size: int = setting(2048, "Rows per entropy chunk (verl); no effect: the fused log-prob "
                                                        "path sizes its own chunks.")
    pad_to_length: bool = setting(False, "Pad micro-batches to fixed lengths (verl, for compiled kernels); no effect: "
                                         "hybridrl trims padding per micro-batch.")
    pad_to_length_bucket: int = setting(1024, "Length bucket of pad_to_length; no effect.")
    qat: QatConfig = section(QatConfig, "Quantization-aware training of this role.")
    turbo_config: dict = setting({}, "verl's fsdp_turbo engine plan (open dict), read only with strategy=fsdp_turbo, "
                                     "which hybridrl refuses.")


@dataclass
class CheckpointConfig:
    """What a checkpoint holds."""

    save_contents: list[str] = setting(
        ["model", "optimizer", "extra"], "Parts to save (add hf_model for a full HF model copy)."
    )
    load_contents: list[str] = setting(
        ["model", "optimizer", "extra"], "Parts to load on resume.", ref="${.save_contents}"
    )
    async_save: bool = setting(False, "Save asynchronously: Megatron only in verl; no effect under FSDP (saves are synchronous).")
    strict: bool = setting(True, "Load checkpoints strictly (every key must match); non-strict loading is not "
                                 "implemented: true only.")
    mbridge_config: dict = setting({}, "Megatron-Bridge checkpoint options (open dict), read only with strategy=megatron.")


@dataclass
class PolicyLossConfig:
    """Policy-loss variant and its parameters."""

    loss_mode: str = setting(
        "vanilla", "Policy loss: vanilla (PPO dual-clip), gspo, sapo, cispo, geo_mean (GMPO), dppo_tv, dppo_kl, gpg, "
        "dro, clip_cov, kl_cov, or a name registered with @register_policy_loss (docs/config.md).")
    clip_cov_ratio: float = setting(0.0002, "clip_cov: fraction of tokens whose gradient is cut.")
    clip_cov_lb: float = setting(1.0, "clip_cov: lower bound of the token covariance window.")
    clip_cov_ub: float = setting(5.0, "clip_cov: upper bound of the token covariance window.")
    kl_cov_ratio: float = setting(0.0002, "kl_cov: fraction of tokens given the |log-ratio| penalty.")
    ppo_kl_coef: float = setting(0.1, "kl_cov: coefficient of the |log-ratio| penalty.")
    dro_beta: float | None = setting(None, "dro: weight of the quadratic log-ratio penalty (required, > 0).")


def forward_only_fsdp() -> FsdpConfig:
    """FSDP settings of a role that never trains (ref)."""
    return FsdpConfig(forward_only=True)

