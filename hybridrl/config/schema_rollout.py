"""Schema of `actor_rollout_ref.rollout.*` (verl HEAD defaults; hybridrl runs its own engine)."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting
from hybridrl.config.schema_actor import DEVICE_IDS_DOC
from hybridrl.config.schema_profiler import RoleProfilerConfig

ROLLOUT_NAMES = ("auto", "hybrid", "hf")


@dataclass
class ValKwargs:
    """Sampling used for validation."""

    top_k: int = setting(-1, "Top-k; -1 = off.")
    top_p: float = setting(1.0, "Nucleus sampling threshold.")
    temperature: float = setting(0.0, "Sampling temperature (must be > 0 when do_sample).")
    n: int = setting(1, "Responses per validation prompt.")
    do_sample: bool = setting(False, "Sample (true) or greedy (false).")


@dataclass
class MultiTurnConfig:
    """Multi-turn / tool-calling rollout (the `tool_agent` agent loop; docs/agentic.md)."""

    enable: bool = setting(False, "Run rollouts through the agent loops (rows without agent_name: agent.default_agent_loop).")
    max_assistant_turns: int | None = setting(None, "Model turns per trajectory; null = until the budget "
                                              "(response_length) or a turn without tool call ends it.")
    tool_config_path: str | None = setting(None, "verl tool YAML: `tools: [{class_name, config, tool_schema}]` "
                                           "(BaseTool classes; verl's built-in class names map onto hybridrl's).")
    function_tool_path: str | None = setting(None, "Python file (or module) whose @function_tool functions (else all "
                                             "public typed functions) are tools; schema from hints + docstring.")
    max_user_turns: int | None = setting(None, "Tool and interaction (user) turns per trajectory; null = unlimited.")
    max_parallel_calls: int = setting(1, "Tool calls executed per model turn (the first ones; the rest are "
                                      "counted in agent_loop/num_tool_calls_over_limit).")
    max_tool_response_length: int = setting(256, "Characters (not tokens) kept of each tool response.")
    tool_response_truncate_side: str = setting("middle", "Which part of a long tool response is cut.",
                                               choices=("left", "right", "middle"))
    tool_call_timeout: float = setting(60.0, "hybridrl: seconds one tool call may take (its instance's creation "
                                       "included) before the model is told it timed out.")
    interaction_config_path: str | None = setting(None, "verl's interaction YAML (simulated users; verl 0.8 removed "
                                                  "them, hybridrl keeps them): `interaction: [{name, class_name, "
                                                  "config}]`; rows pick one by extra_info.interaction_kwargs.name.")
    use_inference_chat_template: bool = setting(False, "verl's legacy SGLang path only; no effect here "
                                                "(warned when true).")
    tokenization_sanity_check_mode: str = setting("strict", "verl's legacy SGLang path only; no effect here: the "
                                                  "token stream is never re-tokenized (warned when not strict).")
    format: str = setting("hermes", "Tool-call format (parser): hermes (Qwen2.5 / Qwen3).")
    num_repeat_rollouts: int | None = setting(None, "Unused by verl's agent loop; no effect (warned when set): "
                                              "use rollout.n.")


@dataclass
class CustomAsyncServer:
    """A custom rollout server class."""

    path: str | None = setting(None, "File or module that defines the server.")
    name: str | None = setting(None, "Class name inside `path`.")


@dataclass
class AgentConfig:
    """Agent-loop settings."""

    num_workers: int = setting(8, "verl: agent-loop worker processes. hybridrl runs every trajectory of a batch "
                               "concurrently in one event loop; this sizes its thread pools (templates, tools).")
    default_agent_loop: str = setting("single_turn_agent", "Agent loop for rows without agent_name.")
    agent_loop_config_path: str | None = setting(None, "YAML list of custom agent loops: {name, _target_, options}.")
    custom_async_server: CustomAsyncServer = section(CustomAsyncServer, "A custom rollout server.")


@dataclass
class SGLangServerConfig:
    """verl's HTTP client settings for an SGLang rollout server (verl's sglang_multiturn server examples). hybridrl's
    engine runs inside the trainer's processes, with no HTTP server between them: no effect."""

    timeout: float = setting(60.0, "Seconds per request to the SGLang server (no effect here).")
    max_attempts: int = setting(3, "Attempts per request (no effect here).")
    retry_delay: float = setting(2.0, "Seconds between attempts (no effect here).")
    max_connections: int = setting(1000, "Concurrent connections (no effect here).")
    max_start_wait_time: float = setting(300.0, "Seconds to wait for the server to start (no effect here).")


@dataclass
class CheckpointEngineConfig:
    """How weights move from the trainer to the rollout."""

    backend: str = setting("naive", "Weight transfer backend (colocated: in-process copy).")
    update_weights_bucket_megabytes: int = setting(2048, "vLLM transfer bucket size; no effect here (weights move one FSDP unit "
                                                   "at a time, or through one shared-memory buffer).")
    engine_kwargs: dict = setting({}, "Weight-transfer backend options; no effect (weights move one FSDP unit at a time or through shared memory).")
    custom_backend_module: str | None = setting(None, "Module of a custom weight-transfer backend (verl); not implemented: null only.")


@dataclass
class TraceConfig:
    """Rollout tracing: agent-loop trajectories as traces (generate, tool and interaction spans; docs/agentic.md)."""

    backend: str | None = setting(None, "Trace backend: mlflow (MLflow tracing; MLFLOW_TRACKING_URI) or null = off.")
    token2text: bool = setting(False, "Add the decoded text beside the token ids in traces.")
    max_samples_per_step_per_worker: int | None = setting(None, "Prompts traced per generate call of each rollout "
                                                          "rank (all n samples of each); null = every prompt.")
    project_name: str | None = setting("verl_examples", "MLflow experiment of the traces; follows trainer.project_name.",
                                       ref="${oc.select:trainer.project_name,null}")
    experiment_name: str | None = setting("gsm8k", "Trace tag experiment_name; follows trainer.experiment_name.",
                                          ref="${oc.select:trainer.experiment_name,null}")


@dataclass
class PrometheusConfig:
    """Rollout server metrics export."""

    enable: bool = setting(False, "Export rollout metrics to Prometheus.")
    port: int = setting(9090, "Prometheus port.")
    file: str = setting("/tmp/ray/session_latest/metrics/prometheus/prometheus.yml", "Prometheus config file.")
    served_model_name: str | None = setting("~/models/deepseek-llm-7b-chat", "Model name in the metrics; follows "
                                            "actor_rollout_ref.model.path.", ref="${oc.select:actor_rollout_ref.model.path,null}")


@dataclass
class DisaggregationConfig:
    """Prefill/decode disaggregation (SGLang in verl)."""

    enabled: bool = setting(False, "Run prefill and decode on separate replicas (not implemented: false only).")
    prefill_replicas: int = setting(1, "Prefill replicas.")
    decode_replicas: int = setting(1, "Decode replicas.")
    decode_tensor_model_parallel_size: int | None = setting(None, "Tensor parallel size of decode replicas.")
    transfer_backend: str = setting("nixl", "KV transfer backend.")
    bootstrap_port: int | None = setting(None, "Bootstrap port of the KV transfer.")
    ib_device: str | None = setting(None, "InfiniBand device of the KV transfer.")


@dataclass
class RolloutConfig:
    """Generation (our paged-KV engine, or HF generate)."""

    name: str = setting(
        "auto",
        "hybridrl: auto = hybrid (our engine) on GPU, hf on CPU; vllm, sglang and trtllm mean auto (stored as auto).",
        choices=ROLLOUT_NAMES,
    )
    mode: str = setting(
        "async", "async or v0.4's sync: both accepted, same behaviour (batched in-process generation).", choices=("async", "sync")
    )
    temperature: float = setting(1.0, "Sampling temperature.")
    top_k: int = setting(-1, "Top-k; -1 = off.")
    top_p: float = setting(1.0, "Nucleus sampling threshold.")
    prompt_length: int = setting(512, "Prompt tokens (left-padded).", ref="${data.max_prompt_length}")
    response_length: int = setting(512, "Maximum generated tokens.", ref="${data.max_response_length}")
    dtype: str = setting("bfloat16", "Generation weight dtype.")
    gpu_memory_utilization: float = setting(0.5, "Fraction of total device memory for weights + KV cache, in (0, 1]; "
                                                 "the cache planned at start-up shrinks at a wake-up when less is free "
                                                 "then (warned; large batches preempt).")
    ignore_eos: bool = setting(False, "Keep generating after EOS.")
    enforce_eager: bool = setting(False, "Disable the engine's CUDA graphs: decode steps, and prefill steps of at most 64 "
                                         "new tokens per sequence (agent turns). Debugging: eager decode is several "
                                         "times slower.")
    cudagraph_capture_sizes: list[int] | None = setting(None, "Decode batch sizes with a CUDA graph (a batch pads to the next; "
                                                        "max_num_seqs is always added); null = 1, 2, 4, ..., 32, every 16 up "
                                                        "to 512, then eight per doubling.")
    free_cache_engine: bool = setting(True, "Free the KV cache between generation phases.")
    keep_decode_graphs: bool = setting(True, "hybridrl: keep the decode CUDA graphs (and their activation pool, about "
                                             "max_num_seqs x vocab x 2 bytes) and the short-prefill graphs while the "
                                             "KV cache is freed: the cache "
                                             "returns to the same address (CUDA virtual memory), so graphs are captured "
                                             "once per batch size, not after every wake-up. false = free them too.")
    recompute_kv_cache_after_weight_updates: bool = setting(
        True, "hybridrl (NeMo-RL's name), asynchronous trainer modes: true = a request parked across a weight update "
              "resumes by prefilling its tokens with the new weights; false = it keeps its KV cache, computed by "
              "the older weights (PipelineRL's in-flight updates): no re-prefill, so the KV cache stays allocated "
              "through training and the next tokens condition on stale KV (rollout_corr/* show the added mismatch).")
    tensor_model_parallel_size: int = setting(1, "Devices per engine replica (hybridrl default 1, verl: 2): the hybrid engine "
                                                 "splits heads and MLP width over them (on CUDA its all-reduces run inside the "
                                                 "decode CUDA graphs).")
    data_parallel_size: int = setting(1, "Engine-internal data parallelism.")
    expert_parallel_size: int = setting(1, "Engine expert parallelism.")
    pipeline_model_parallel_size: int = setting(1, "Engine pipeline parallelism.")
    max_num_batched_tokens: int = setting(8192, "Tokens per prefill step.")
    max_model_len: int | None = setting(None, "Maximum sequence length; null = prompt_length + response_length.")
    max_num_seqs: int = setting(256, "Sequences decoded at once.")
    enable_chunked_prefill: bool = setting(True, "No effect here: a prompt longer than max_num_batched_tokens runs alone "
                                           "in one prefill step (either value).")
    enable_prefix_caching: bool = setting(True, "Share KV blocks of identical prompt prefixes.")
    logprobs_mode: str = setting("processed_logprobs", "Which log-probs the engine returns.")
    scheduling_policy: str = setting("fcfs", "Request scheduling policy (the engine schedules first come, first served).",
                                     choices=("fcfs",))
    load_format: str = setting("dummy", "vLLM's initial weights; no effect here (the engine starts from the "
                                        "actor's weights).")
    log_prob_micro_batch_size: int | None = setting(None, "Deprecated global micro batch (rows) for old log-probs.")
    log_prob_micro_batch_size_per_gpu: int | None = setting(None, "Rows per old-log-prob forward on each device.")
    log_prob_use_dynamic_bsz: bool = setting(
        False, "Token-budget micro batches for old log-probs.", ref="${actor_rollout_ref.actor.use_dynamic_bsz}"
    )
    log_prob_max_token_len_per_gpu: int = setting(
        16384, "Token budget per micro batch.", ref="${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}"
    )
    disable_log_stats: bool = setting(True, "vLLM statistics logs; no effect here (engine stats are rollout/* metrics).")
    do_sample: bool = setting(True, "Sample (true) or greedy (false) during training.")
    n: int = setting(1, "Responses per prompt (the group size of GRPO/RLOO).")
    over_sample_rate: float = setting(0.0, "Extra prompts generated and dropped to cut long tails.")
    multi_stage_wake_up: bool = setting(False, "Either value: the engine keeps its weights while asleep (updated in place) "
                                                "and allocates its KV cache at wake-up, after the update (vLLM's staged wake-up).")
    engine_kwargs: dict = setting({"vllm": {}, "sglang": {}, "trtllm": {}}, "vLLM / SGLang / TRT-LLM options (open dict), read for "
                                  "the engine rollout.name names: those with a counterpart set it (docs/config.md), the "
                                  "rest have no effect (an info line lists them).")
    val_kwargs: ValKwargs = section(ValKwargs, "Validation sampling.")
    multi_turn: MultiTurnConfig = section(MultiTurnConfig, "Multi-turn rollout.")
    calculate_log_probs: bool = setting(False, "The engine always returns its log-probs (rollout_log_probs, used for "
                                        "training/rollout_probs_diff_*); either value.")
    agent: AgentConfig = section(AgentConfig, "Agent loop.")
    checkpoint_engine: CheckpointEngineConfig = section(CheckpointEngineConfig, "Weight transfer to the engine.")
    trace: TraceConfig = section(TraceConfig, "Rollout tracing.")
    skip_rollout: bool = setting(False, "Reuse rollouts dumped to skip_dump_dir.")
    skip_dump_dir: str = setting("/tmp/rollout_dump", "Where skipped rollouts are cached.")
    skip_tokenizer_init: bool = setting(True, "The engine works on token ids only (either value).")
    enable_rollout_routing_replay: bool = setting(False, "Record MoE routing during rollout.")
    prometheus: PrometheusConfig = section(PrometheusConfig, "Metrics export.")
    quantization: str | None = setting(None, "Rollout weight quantization (fp8|torchao); null = off.")
    quantization_config_file: str | None = setting(None, "Quantization config file.")
    layered_summon: bool = setting(False, "Either value: weight sync from FSDP ranks always gathers one unit (layer) at a time.")
    seed: int | None = setting(None, "hybridrl: sampling seed of the engine; null = derived from trainer.seed.")
    block_size: int = setting(16, "hybridrl: tokens per KV-cache block of our engine.")
    device_ids: list[int] | None = setting(None, DEVICE_IDS_DOC)
    nnodes: int = setting(0, "verl's standalone rollout pool (nodes; 0 = colocated with training); hybridrl places "
                             "the rollout with device_ids: 0 only.")
    n_gpus_per_node: int | None = setting(None, "Devices per node of verl's standalone rollout pool; follows "
                                                "trainer.n_gpus_per_node (used only with nnodes > 0).",
                                          ref="${oc.select:trainer.n_gpus_per_node,8}")
    full_determinism: bool = setting(False, "Deterministic generation kernels (not implemented: false only).")
    moe_load_balance_metrics_interval: int = setting(0, "Steps between MoE load-balance metrics (not implemented: 0 only).")
    mtp: dict | None = setting(None, "Speculative decoding with the model's MTP heads; verl copies "
                                     "actor_rollout_ref.model.mtp here, which hybridrl reads (refused when enabled).")
    qat: dict | None = setting(None, "Quantization-aware rollout; verl copies the actor's fsdp_config.qat here, which "
                                     "hybridrl reads (refused when enabled).")
    disaggregation: DisaggregationConfig = section(DisaggregationConfig, "Prefill/decode disaggregation.")
    layer_name_map: dict = setting({}, "Megatron-to-engine layer names (verl's Megatron configs); no effect here.")
    server: SGLangServerConfig = section(SGLangServerConfig, "verl's SGLang server client settings (no effect here).")
    sglang_rollout_mode: str | None = setting(None, "Set by verl's sglang_multiturn server examples, read by neither "
                                                    "verl nor hybridrl (one notice when set).")
    profiler: RoleProfilerConfig = section(RoleProfilerConfig, "Profiling of this role (verl).")
