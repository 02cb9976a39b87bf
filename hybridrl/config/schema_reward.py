"""Schema of `critic.*`, `reward_model.*`, `reward_manager.*` and `custom_reward_function.*`."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting
from hybridrl.config.schema_actor import DEVICE_IDS_DOC, MEGATRON_DOC, STRATEGIES, VEOMNI_DOC
from hybridrl.config.schema_model import (
    CheckpointConfig,
    FsdpConfig,
    FusedKernelOptions,
    MtpConfig,
    OptimConfig,
    TiledMlpConfig,
)
from hybridrl.config.schema_profiler import RoleProfilerConfig

REWARD_ROLLOUT_DOC = ("The engine verl serves the reward model with (name, gpu_memory_utilization, "
                      "free_cache_engine, max_model_len, tensor_model_parallel_size=1, ...; open dict). A discriminative "
                      "reward model runs in process and these have no effect; with custom_reward_function.path it is a "
                      "generative reward model served by hybridrl's engine on loopback (docs/custom-reward.md).")
REMOTE_TYPE_DOC = "hybridrl: null = local model; vllm_api = remote endpoint at model.path=http://host:port."


@dataclass
class RemoteClientConfig:
    """hybridrl: requests to a remote scoring endpoint (type=vllm_api). At worst one batch of rows waits
    (max_retries + 1) x timeout_s + backoff_s x (2^max_retries - 1) seconds before the run stops."""

    timeout_s: float = setting(60.0, "Total deadline of one HTTP request (connect, send, wait, read), however the "
                                     "server trickles its answer; a request past it is retried.")
    max_retries: int = setting(3, "Retries of a request after a connection error, a timeout or an HTTP 5xx/408/429 "
                                  "(each logged with the endpoint, attempt and cause); other 4xx are not retried.")
    backoff_s: float = setting(1.0, "Wait before the first retry; doubled for each further one.")


@dataclass
class CriticModelConfig:
    """The value model (a causal LM with a scalar head)."""

    path: str = setting(
        "~/models/deepseek-llm-7b-chat",
        "Local HF model directory of the critic; follows the actor's model.path unless set (verl: a fixed path).",
        ref="${actor_rollout_ref.model.path}",
    )
    tokenizer_path: str = setting(
        "~/models/deepseek-llm-7b-chat", "Tokenizer directory.", ref="${actor_rollout_ref.model.path}"
    )
    override_config: dict = setting({}, "Entries merged into the HF config.")
    external_lib: str | None = setting(None, "Module imported before loading.")
    trust_remote_code: bool = setting(False, "Allow model code from the model repo.")
    use_shm: bool = setting(False, "Copy the model to /dev/shm before loading.")
    enable_gradient_checkpointing: bool = setting(True, "Recompute activations in backward.")
    enable_activation_offload: bool = setting(False, "Keep what the critic's training forward saves for backward "
                                                     "in host memory (see actor_rollout_ref.model).")
    use_remove_padding: bool = setting(False, "Drop all-padding columns per micro batch (see actor_rollout_ref.model).")
    lora_rank: int = setting(0, "LoRA rank; 0 = full fine-tuning.")
    lora_alpha: int = setting(16, "LoRA alpha.")
    target_modules: str | list[str] = setting("all-linear", "Modules that get LoRA adapters.")
    fsdp_config: FsdpConfig = section(FsdpConfig, "Critic FSDP settings.")
    # verl's August-2026 tree builds the critic model from hf_model.yaml, so it carries the policy model's keys.
    hf_config_path: str | None = setting(None, "Read config.json from here instead of `path` (not implemented for "
                                               "the critic: null only).")
    custom_chat_template: str | None = setting(None, "No effect: the critic reads the actor's token ids.")
    exclude_modules: str | list[str] | None = setting(None, "Modules excluded from LoRA (critic LoRA is refused).")
    lora_adapter_path: str | None = setting(None, "Critic LoRA adapter to start from (critic LoRA is refused).")
    use_liger: bool = setting(False, "Patch the critic with Liger kernels (not implemented: false only).")
    use_fused_kernels: bool = setting(False, "Accepted either way: the value head needs no vocabulary log-probs.")
    fused_kernel_options: FusedKernelOptions = section(FusedKernelOptions, "Fused kernel options.")
    tiled_mlp: TiledMlpConfig = section(TiledMlpConfig, "Tiled MLP options.")
    mtp: MtpConfig = section(MtpConfig, "Multi-token prediction options (not used by a value model).")
    lora: dict = setting({}, "verl's Megatron LoRA settings (open dict), read only with strategy=megatron.")


@dataclass
class CriticConfig:
    """The value function (PPO/GAE). Batch sizes follow the actor's rules."""

    enable: bool | None = setting(None, "null = auto: enabled iff algorithm.adv_estimator == gae.")
    strategy: str = setting("fsdp", "Engine strategy (fsdp and fsdp2 both mean FSDP2 here).", choices=STRATEGIES)
    rollout_n: int = setting(1, "Responses per prompt.", ref="${actor_rollout_ref.rollout.n}")
    optim: OptimConfig = section(lambda: OptimConfig(lr=1e-5), "Critic optimizer.")
    model: CriticModelConfig = section(CriticModelConfig, "Critic model.")
    ppo_mini_batch_size: int = setting(
        256, "Prompts per critic optimizer step.", ref="${actor_rollout_ref.actor.ppo_mini_batch_size}"
    )
    ppo_micro_batch_size: int | None = setting(None, "Deprecated global micro batch (rows).")
    ppo_micro_batch_size_per_gpu: int | None = setting(None, "Rows per critic forward/backward on each device.")
    use_dynamic_bsz: bool = setting(
        False, "Token-budget micro batches for the critic.", ref="${actor_rollout_ref.actor.use_dynamic_bsz}"
    )
    ppo_max_token_len_per_gpu: int = setting(32768, "Token budget per training micro batch.")
    forward_max_token_len_per_gpu: int = setting(32768, "Token budget per value micro batch.", ref="${.ppo_max_token_len_per_gpu}")
    forward_micro_batch_size: int | None = setting(None, "Deprecated global value micro batch.", ref="${.ppo_micro_batch_size}")
    forward_micro_batch_size_per_gpu: int | None = setting(
        None, "Rows per value forward on each device.", ref="${.ppo_micro_batch_size_per_gpu}"
    )
    ppo_epochs: int = setting(1, "Passes over each batch.", ref="${actor_rollout_ref.actor.ppo_epochs}")
    shuffle: bool = setting(False, "Shuffle rows between mini batches.", ref="${actor_rollout_ref.actor.shuffle}")
    data_loader_seed: int = setting(42, "Seed of the mini-batch shuffling.")
    cliprange_value: float = setting(0.5, "Value clipping epsilon.")
    loss_agg_mode: str = setting(
        "token-mean",
        "How token losses are averaged.",
        ref="${actor_rollout_ref.actor.loss_agg_mode}",
        choices=("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
    )
    loss_agg_scope: str = setting(
        "mini_batch", "What the value loss's mean runs over (see actor_rollout_ref.actor.loss_agg_scope).",
        ref="${actor_rollout_ref.actor.loss_agg_scope}", choices=("mini_batch", "micro_batch"),
    )
    ulysses_sequence_parallel_size: int = setting(1, "Ulysses sequence parallel.")
    grad_clip: float = setting(1.0, "Gradient-norm clip.")
    checkpoint: CheckpointConfig = section(CheckpointConfig, "Critic checkpoint contents.")
    type: str | None = setting(None, REMOTE_TYPE_DOC, choices=(None, "vllm_api"))
    remote: RemoteClientConfig = section(RemoteClientConfig, "hybridrl: deadline and retries of a remote critic.")
    device_ids: list[int] | None = setting(None, DEVICE_IDS_DOC)
    loss_scale_factor: float | None = setting(None, "Divisor for seq-mean-token-sum-norm; follows the actor's.",
                                              ref="${oc.select:actor_rollout_ref.actor.loss_scale_factor,null}")
    nccl_timeout: int = setting(600, "Seconds before a collective of the critic times out.")
    profiler: RoleProfilerConfig = section(RoleProfilerConfig, "Profiling of this role (verl).")
    megatron: dict = setting({}, MEGATRON_DOC)
    veomni: dict = setting({}, VEOMNI_DOC)


@dataclass
class RewardModelModelConfig:
    """The reward model."""

    input_tokenizer: str = setting(
        "~/models/deepseek-llm-7b-chat", "Tokenizer of the policy's text; no effect (the policy's own tokenizer decodes "
        "the responses, and the reward model's chat template re-renders them when the two differ).", ref="${actor_rollout_ref.model.path}"
    )
    path: str = setting("~/models/FsfairX-LLaMA3-RM-v0.1", "Local HF reward model directory.")
    external_lib: str | None = setting(None, "Module imported before loading.")
    trust_remote_code: bool = setting(False, "Allow model code from the model repo.")
    override_config: dict = setting({}, "Entries merged into the HF config.")
    use_shm: bool = setting(False, "Copy the model to /dev/shm before loading.")
    use_remove_padding: bool = setting(False, "Accepted; no effect on the reward model (padded rows score the same).")
    use_fused_kernels: bool = setting(False, "Fused kernels (always chunked here).")
    fsdp_config: FsdpConfig = section(FsdpConfig, "Reward model FSDP settings.")


@dataclass
class SandboxFusionConfig:
    """Code execution for the code data sources (codecontests, apps, codeforces, taco)."""

    url: str | None = setting(None, "SandboxFusion endpoint (http://host:port/run_code) that runs the tests; null = "
                                    "hybridrl's local sandbox (a confined process per run, no network where the kernel "
                                    "allows namespaces).")
    max_concurrent: int = setting(64, "Requests in flight to SandboxFusion at once (per scoring process).")
    memory_limit_mb: int = setting(1024, "Memory per execution in MB: SandboxFusion's memory_limit_MB, and the address-"
                                         "space limit of local runs (verl's local runs have none).")


@dataclass
class OverlongBufferConfig:
    """DAPO's overlong reward shaping, as verl's DAPO recipe spells it (reward_manager.name=dapo)."""

    enable: bool = setting(False, "Penalise responses longer than data.max_response_length - len.")
    len: int = setting(0, "Buffer length L_cache in tokens; the penalty grows linearly over it.")
    penalty_factor: float = setting(0.0, "Penalty at data.max_response_length (the full buffer).")
    log: bool = setting(False, "Add overlong_reward and overlong to the per-row reward extra info.")


@dataclass
class RewardModelConfig:
    """Model-based reward and the reward function's runtime."""

    enable: bool = setting(False, "Score training rollouts with a reward model (validation keeps rule rewards, as verl).")
    enable_resource_pool: bool = setting(False, "verl: the reward model on its own Ray pool; accepted with a notice (no "
                                          "pool is built: the reward model runs on reward_model.device_ids).")
    n_gpus_per_node: int = setting(8, "Devices per node of verl's reward pool (enable_resource_pool); no effect: use reward_model.device_ids.")
    nnodes: int = setting(0, "Nodes of verl's reward pool (enable_resource_pool); no effect: use reward_model.device_ids.")
    strategy: str = setting("fsdp", "Engine strategy.", choices=STRATEGIES)
    model: RewardModelModelConfig = section(RewardModelModelConfig, "Reward model.")
    micro_batch_size: int | None = setting(None, "Deprecated global micro batch (rows).")
    micro_batch_size_per_gpu: int | None = setting(None, "Rows per reward forward on each device.")
    max_length: int | None = setting(None, "Maximum reward model input length.")
    use_dynamic_bsz: bool = setting(
        False, "Token-budget micro batches for the reward model (forward_max_token_len_per_gpu) instead of "
        "micro_batch_size_per_gpu rows (null: 8).", ref="${critic.use_dynamic_bsz}"
    )
    forward_max_token_len_per_gpu: int = setting(
        32768, "Token budget per reward model forward with use_dynamic_bsz (rows x padded length).",
        ref="${critic.forward_max_token_len_per_gpu}"
    )
    reward_manager: str = setting("naive", "Deprecated spelling of reward_manager.name.")
    overlong_buffer: OverlongBufferConfig = section(
        OverlongBufferConfig, "DAPO overlong penalty (verl's DAPO recipe spelling; or reward_kwargs.overlong_buffer_cfg).")
    reward_loop_source: str = setting("register", "Where the reward loop class comes from; no effect (custom loops are refused: see reward_loop_module_path).")
    reward_loop_module_path: str | None = setting(None, "File of a custom reward loop.")
    reward_loop_class_name: str | None = setting(None, "Class of a custom reward loop.")
    launch_reward_fn_async: bool = setting(
        False, "Score with the reward function on a thread while the old_log_prob/ref/values forwards run "
        "(reward models stay synchronous); timing_s/reward is then only the wait left.")
    sandbox_fusion: SandboxFusionConfig = section(SandboxFusionConfig, "Code sandbox.")
    ulysses_sequence_parallel_size: int = setting(1, "Ulysses sequence parallel.")
    use_reward_loop: bool = setting(True, "verl's reward-loop path (accepted; scoring runs after generation here).")
    num_workers: int = setting(1, "Reward scoring processes: above 1, the reward function runs in that many spawned "
                               "processes (rows in parallel, no GIL shared with the trainer); 1 scores in the trainer's "
                               "process (on a thread with launch_reward_fn_async). Reward models are not affected.")
    reward_kwargs: dict = setting({}, "Arguments of the reward manager (verl): dapo takes max_resp_len and "
                                  "overlong_buffer_cfg.{enable,len,penalty_factor,log}; batch passes them to the batched "
                                  "function; prime takes timeout and num_processes (hybridrl); naive takes none.", plus=True)
    on_error: str = setting(
        "raise",
        "hybridrl: a reward function that raises or runs past reward_fn_timeout_s stops the run (raise) or scores 0, "
        "counted in reward/num_errors / reward/num_timeouts (zero).",
        choices=("raise", "zero"),
    )
    reward_fn_timeout_s: float | None = setting(
        300.0, "hybridrl: the most one call of the reward function may take; a call past it is stopped and follows "
        "on_error (raise: stop naming the row; zero: score 0, counted in reward/num_timeouts). null = no limit.")
    type: str | None = setting(None, REMOTE_TYPE_DOC, choices=(None, "vllm_api"))
    remote: RemoteClientConfig = section(RemoteClientConfig, "hybridrl: deadline and retries of a remote reward model.")
    device_ids: list[int] | None = setting(None, DEVICE_IDS_DOC)
    rollout: dict = setting({}, REWARD_ROLLOUT_DOC)
    profiler: RoleProfilerConfig = section(RoleProfilerConfig, "Profiling of this role (verl).")
    megatron: dict = setting({}, MEGATRON_DOC)
    nccl_timeout: int = setting(600, "Seconds before a collective of the reward model times out.")


@dataclass
class RewardManagerModule:
    """A custom reward manager module."""

    path: str | None = setting(None, "File defining the reward-manager class (reward_manager.source=importlib).")
    name: str = setting("custom_reward_manager", "Unused, as in verl: the class is reward_manager.name.")


@dataclass
class RewardManagerConfig:
    """Which reward manager turns responses into token-level scores."""

    source: str = setting("register", "register = a registered manager by name; importlib = the class `name` from "
                          "module.path.", choices=("register", "importlib"))
    name: str = setting(
        "naive", "Reward manager: naive | batch | dapo | prime (register), or the class name in module.path (importlib).",
        ref="${oc.select:reward_model.reward_manager,naive}"
    )
    module: RewardManagerModule = section(RewardManagerModule, "Custom reward manager module.")


@dataclass
class CustomRewardFunctionConfig:
    """A user reward function `fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`."""

    path: str | None = setting(None, "Python file defining the function; null = built-in scorers by data_source.")
    name: str = setting("compute_score", "Function name inside `path`.")
    reward_kwargs: dict = setting({}, "Extra kwargs passed to every call.", plus=True)
