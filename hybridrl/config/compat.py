"""verl compatibility: older key spellings, keys that must agree, and the NOT_IMPLEMENTED table.

Feature owners: when a feature lands, delete its NOT_IMPLEMENTED entry (and its test case in
tests/config/test_compat.py); nothing else needs to change.
"""

from __future__ import annotations

from typing import Any

from hybridrl.config.index import get_in, set_in

# Older spelling -> HEAD spelling (exact keys). A null value for these meant "unset" in verl, so it is a no-op.
ALIASES: dict[str, str] = {
    "actor_rollout_ref.actor.optim.warmup_style": "actor_rollout_ref.actor.optim.lr_scheduler_type",
    "critic.optim.warmup_style": "critic.optim.lr_scheduler_type",
    "ray_init.timeline_json_file": "ray_kwargs.timeline_json_file",
    "trainer.profile_steps": "global_profiler.steps",
}
# v0.4 kept ray.init kwargs at the top level: `ray_init.num_cpus` -> `ray_kwargs.ray_init.num_cpus`.
PREFIX_ALIASES: tuple[tuple[str, str], ...] = (("ray_init", "ray_kwargs.ray_init"),)

GAE_AND_FRIENDS = (
    "gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "grpo_vectorized", "rloo_vectorized",
)  # fmt: skip

_LATER = "not implemented in hybridrl yet"
# key -> (accepted values, message). A value outside `accepted` raises ConfigError with the message.
FSDP_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model")  # where each fsdp_config lives

NOT_IMPLEMENTED: dict[str, tuple[tuple[Any, ...], str]] = {
    # Trainer features that arrive with the GPU hybrid-engine and scale-out issues. Until then they are
    # refused rather than silently ignored.
    **{f"{role}.fsdp_config.offload_policy": ((False,), f"FSDP2's CPUOffloadPolicy is {_LATER}; use "
                                                        "param_offload / optimizer_offload")
       for role in FSDP_ROLES},
    **{f"{role}.fsdp_config.wrap_policy.min_num_params": ((0,), f"size-based FSDP wrapping is {_LATER}; each "
                                                                 "decoder layer is one FSDP unit (0)")
       for role in FSDP_ROLES},
    **{f"{role}.fsdp_config.full_determinism": ((False,), f"deterministic kernels (full_determinism) are {_LATER}")
       for role in FSDP_ROLES},
    "actor_rollout_ref.model.enable_activation_offload": ((False,), f"activation offload is {_LATER}"),
    "trainer.val_only": ((False,), f"validation-only runs are {_LATER}"),
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": ((1,), f"Ulysses sequence parallelism is {_LATER}"),
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size": ((1,), f"Ulysses sequence parallelism is {_LATER}"),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": ((1,), f"Ulysses sequence parallelism is {_LATER}"),
    "critic.ulysses_sequence_parallel_size": ((1,), f"Ulysses sequence parallelism is {_LATER}"),
    "actor_rollout_ref.model.use_liger": ((False,), f"Liger kernels are {_LATER}"),
    "actor_rollout_ref.actor.strategy": (("fsdp", "fsdp2"), f"the Megatron engine is {_LATER}; use fsdp2"),
    "actor_rollout_ref.ref.strategy": (("fsdp", "fsdp2"), f"the Megatron engine is {_LATER}; use fsdp2"),
    "critic.strategy": (("fsdp", "fsdp2"), f"the Megatron engine is {_LATER}; use fsdp2"),
    "actor_rollout_ref.rollout.multi_turn.enable": ((False,), f"multi-turn / tool rollouts are {_LATER}"),
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": ((None,), f"custom agent loops are {_LATER}"),
    "algorithm.use_pf_ppo": ((False,), f"PF-PPO is {_LATER}"),
    "algorithm.filter_groups.enable": ((False,), f"DAPO dynamic sampling (filter_groups) is {_LATER}"),
    "algorithm.rollout_correction.rollout_is": ((None,), f"rollout-correction importance sampling is {_LATER}"),
    "algorithm.rollout_correction.rollout_rs": ((None,), f"rollout-correction rejection sampling is {_LATER}"),
    "algorithm.rollout_correction.bypass_mode": ((False,), f"rollout-correction bypass mode is {_LATER}"),
    "actor_rollout_ref.rollout.quantization": ((None,), f"rollout quantization is {_LATER}"),
    "actor_rollout_ref.model.mtp.enable": ((False,), f"multi-token prediction is {_LATER}"),
    "actor_rollout_ref.actor.policy_loss.loss_mode": (("vanilla", "gspo"), f"this policy loss is {_LATER}; use vanilla or gspo"),
    "algorithm.adv_estimator": (GAE_AND_FRIENDS, f"this advantage estimator is {_LATER}; use one of {', '.join(GAE_AND_FRIENDS)}"),
    "actor_rollout_ref.rollout.pipeline_model_parallel_size": ((1,), f"pipeline-parallel rollout is {_LATER}; use 1"),
    "actor_rollout_ref.rollout.data_parallel_size": ((1,), "engine-internal data parallelism is not used: every device runs a replica"),
    "actor_rollout_ref.rollout.expert_parallel_size": ((1,), f"expert-parallel rollout is {_LATER}; use 1"),
    "actor_rollout_ref.rollout.skip_rollout": ((False,), f"rollout skipping (cached rollouts) is {_LATER}"),
    "actor_rollout_ref.rollout.over_sample_rate": ((0, 0.0), f"over-sampling prompts to cut long tails is {_LATER}"),
    "actor_rollout_ref.rollout.multi_stage_wake_up": ((False,), f"staged wake-up is {_LATER}; the KV cache is "
                                                                "allocated in one step after the weights"),
    "actor_rollout_ref.rollout.trace.backend": ((None,), f"rollout tracing is {_LATER}"),
    "actor_rollout_ref.actor.router_replay.mode": (("disabled",), f"MoE router replay is {_LATER}"),
    "data.custom_cls.path": ((None,), f"custom dataset classes are {_LATER}"),
    "data.sampler.class_path": ((None,), f"custom (curriculum) samplers are {_LATER}"),
    "data.datagen.path": ((None,), f"dynamic data generation is {_LATER}"),
    "global_profiler.tool": ((None, "torch", "torch_memory"), "hybridrl profiles with tool=torch (traces) or "
                             "tool=torch_memory (CUDA allocator snapshots); for Nsight Systems run the whole job under "
                             "`nsys profile -t cuda,nvtx python -m hybridrl ...`; Ascend NPUs are not supported"),
    "trainer.esi_redundant_time": ((0,), f"ESI pre-expiry checkpointing is {_LATER}"),
    "trainer.default_hdfs_dir": ((None,), f"HDFS checkpoint mirroring is {_LATER}"),
    "data.use_shm": ((False,), f"/dev/shm preloading is {_LATER}"),
    "actor_rollout_ref.model.use_shm": ((False,), f"/dev/shm preloading is {_LATER}"),
    "transfer_queue.enable": ((False,), f"the transfer queue is {_LATER}"),
    "critic.model.lora_rank": ((0,), "LoRA arrives in a later hybridrl release; use lora_rank=0 (full fine-tuning)"),
    "actor_rollout_ref.actor.use_prefix_grouper": ((False,), f"sharing a group's prompt prefix in the training forward is {_LATER}"),
    "actor_rollout_ref.actor.calculate_sum_pi_squared": ((False,), f"sum(pi^2) per token (optimal-token baseline) is {_LATER}"),
    "actor_rollout_ref.rollout.prometheus.enable": ((False,), f"Prometheus export is {_LATER}; engine statistics are the "
                                                              "rollout/* metrics of every step"),
    "actor_rollout_ref.rollout.enable_rollout_routing_replay": ((False,), f"MoE routing replay is {_LATER}"),
    "reward_model.enable_resource_pool": ((False,), "a separate Ray resource pool for the reward model is not built; "
                                                    "give it its own devices with reward_model.device_ids"),
    "actor_rollout_ref.model.tiled_mlp.enabled": ((False,), f"tiled MLP is {_LATER}; bound activation memory with "
                                                            "enable_gradient_checkpointing and use_dynamic_bsz token budgets"),
    "actor_rollout_ref.rollout.logprobs_mode": (("processed_logprobs",), "the engine returns each sampled token's "
                                                "log-prob under logits / temperature, before top-k/top-p (what the "
                                                "trainer recomputes); other modes are not implemented"),
    "reward_model.reward_loop_module_path": ((None,), f"custom reward loops are {_LATER}; use "
                                                      "custom_reward_function.path with verl's compute_score signature"),
    "reward_model.reward_loop_class_name": ((None,), f"custom reward loops are {_LATER}; use "
                                                     "custom_reward_function.path with verl's compute_score signature"),
    "reward_model.ulysses_sequence_parallel_size": ((1,), f"Ulysses sequence parallelism is {_LATER}"),
    "reward_model.strategy": (("fsdp", "fsdp2"), f"the Megatron engine is {_LATER}; use fsdp2"),
    "actor_rollout_ref.hybrid_engine": ((True,), "only the hybrid engine exists (as in verl): keep hybrid_engine=true"),
}

# Keys whose verl values name software hybridrl replaces (permanent, unlike NOT_IMPLEMENTED).
REPLACED: dict[str, tuple[tuple[Any, ...], str]] = {
    "actor_rollout_ref.rollout.name": (
        ("auto", "hybrid", "hf"),
        "hybridrl ships its own rollout engine: use actor_rollout_ref.rollout.name=hybrid (or hf, or auto); nothing to install",
    ),
}


def canonical_path(path: str) -> str:
    """The HEAD spelling of a dotted key (unchanged when it already is one)."""
    if path in ALIASES:
        return ALIASES[path]
    for old, new in PREFIX_ALIASES:
        if path == old or path.startswith(old + "."):
            return new + path[len(old) :]
    return path


def is_prefix_alias(path: str) -> bool:
    """True for an old group name whose keys move one by one (`ray_init`)."""
    return any(path == old for old, _ in PREFIX_ALIASES)


def check_unsupported(values: dict[str, Any]) -> list[str]:
    """One message per key of NOT_IMPLEMENTED or REPLACED whose value (from `values`: path -> value) is refused."""
    problems = []
    for table in (REPLACED, NOT_IMPLEMENTED):
        for path, (accepted, why) in table.items():
            value = values[path]
            if value not in accepted:
                problems.append(f"{path}={value!r}: {why}")
    return problems


def _agree(tree: dict[str, Any], explicit: set[str], first: str, second: str) -> list[str]:
    """Two spellings of one setting: copy the one the user set onto the other; both set differently is an error."""
    a, b = get_in(tree, first), get_in(tree, second)
    if first in explicit and second in explicit and a != b:
        return [f"{first}={a!r} and {second}={b!r} are two spellings of one setting; set only one"]
    if second in explicit and first not in explicit:
        set_in(tree, first, b)
    elif first in explicit:
        set_in(tree, second, a)
    return []


def normalize_tree(tree: dict[str, Any], explicit: set[str]) -> list[str]:
    """Reconcile keys verl spells twice (in place, before `${...}` resolution); returns problems found."""
    problems = _agree(
        tree, explicit,
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
    )  # fmt: skip
    problems += _agree(tree, explicit, "reward_model.reward_manager", "reward_manager.name")
    for role in ("actor_rollout_ref.actor", "critic"):  # verl's newer optimizer configs carry the clip too
        problems += _agree(tree, explicit, f"{role}.grad_clip", f"{role}.optim.clip_grad")
    logger = get_in(tree, "trainer.logger")
    if isinstance(logger, str):
        set_in(tree, "trainer.logger", [logger])  # verl's Tracking wraps a bare string too
    if get_in(tree, "trainer.remove_previous_ckpt_in_save") is True:
        for key in ("trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep"):
            value = get_in(tree, key)
            if key in explicit and value not in (None, 1):
                problems.append(f"trainer.remove_previous_ckpt_in_save=true means {key}=1, but {key}={value!r}; set one")
            set_in(tree, key, 1)
    return problems
