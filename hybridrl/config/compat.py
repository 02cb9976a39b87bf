"""verl keys hybridrl knows but refuses at some values: the NOT_IMPLEMENTED and REPLACED tables.

Feature owners: when a feature lands, delete its NOT_IMPLEMENTED entry (and its test case in
tests/config/test_compat.py); nothing else needs to change. Other spellings of keys live in `spellings.py`
and `legacy.py`, the keys verl spells twice in `agreement.py`.
"""

from __future__ import annotations

import os
from typing import Any

from hybridrl.config.index import get_in

GAE_AND_FRIENDS = (
    "gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "grpo_vectorized", "rloo_vectorized",
    "opo", "gpg", "grpo_passk", "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline",
)  # fmt: skip
# verl's loss modes but bypass_mode, which the trainer selects itself with algorithm.rollout_correction.bypass_mode.
POLICY_LOSS_MODES = (
    "vanilla", "gspo", "sapo", "cispo", "geo_mean", "dppo_tv", "dppo_kl", "gpg", "dro", "clip_cov", "kl_cov",
)  # fmt: skip
# Keys a user module named in VERL_USE_EXTERNAL_MODULES may extend with @register_policy_loss / @register_adv_est:
# with that variable set, their values are checked when the registry is read instead.
REGISTRY_KEYS = ("actor_rollout_ref.actor.policy_loss.loss_mode", "algorithm.adv_estimator")

_LATER = "not implemented in hybridrl yet"
_ENGINES = (f"only the FSDP engine (fsdp, fsdp2) is implemented; the Megatron, TorchTitan, VeOmni and fsdp_turbo "
            f"engines are {_LATER} (nor Megatron-lite, AutoModel): use fsdp2 (and model_engine=dp)")
# key -> (accepted values, message). A value outside `accepted` raises ConfigError with the message.
FSDP_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model")  # where each fsdp_config lives

NOT_IMPLEMENTED: dict[str, tuple[tuple[Any, ...], str]] = {
    # Trainer features that arrive with the GPU hybrid-engine and scale-out issues. Until then they are
    # refused rather than silently ignored.
    **{f"{role}.fsdp_config.wrap_policy.min_num_params": ((0,), f"size-based FSDP wrapping is {_LATER}; each "
                                                                 "decoder layer is one FSDP unit (0)")
       for role in FSDP_ROLES},
    **{f"{role}.fsdp_config.full_determinism": ((False,), f"deterministic kernels (full_determinism) are {_LATER}")
       for role in FSDP_ROLES},
    "actor_rollout_ref.model.use_liger": ((False,), f"Liger kernels are {_LATER}"),
    "actor_rollout_ref.actor.strategy": (("fsdp", "fsdp2"), _ENGINES),
    "actor_rollout_ref.ref.strategy": (("fsdp", "fsdp2"), _ENGINES),
    "critic.strategy": (("fsdp", "fsdp2"), _ENGINES),
    "algorithm.use_pf_ppo": ((False,), f"PF-PPO is {_LATER}"),
    "actor_rollout_ref.rollout.quantization": ((None,), f"rollout quantization is {_LATER}"),
    "actor_rollout_ref.model.mtp.enable": ((False,), f"multi-token prediction is {_LATER}"),
    "actor_rollout_ref.actor.policy_loss.loss_mode": (POLICY_LOSS_MODES, f"this policy loss is {_LATER}; use one of "
                                                      f"{', '.join(POLICY_LOSS_MODES)}, or register yours (docs/config.md); bypass_mode is "
                                                      "selected by algorithm.rollout_correction.bypass_mode=true"),
    "algorithm.adv_estimator": (GAE_AND_FRIENDS, f"this advantage estimator is {_LATER}; use one of "
                                f"{', '.join(GAE_AND_FRIENDS)}, or register yours (docs/config.md)"),
    "actor_rollout_ref.rollout.pipeline_model_parallel_size": ((1,), f"pipeline-parallel rollout is {_LATER}; use 1"),
    "actor_rollout_ref.rollout.data_parallel_size": ((1,), "engine-internal data parallelism is not used: every device runs a replica"),
    "actor_rollout_ref.rollout.expert_parallel_size": ((1,), f"expert-parallel rollout is {_LATER}; use 1"),
    "actor_rollout_ref.rollout.skip_rollout": ((False,), f"rollout skipping (cached rollouts) is {_LATER}"),
    "actor_rollout_ref.rollout.trace.backend": ((None, "mlflow"), "W&B Weave tracing is not implemented (its client "
                                                "pulls in the whole wandb stack); use trace.backend=mlflow "
                                                "(`pip install 'hybridrl[mlflow]'`), whose traces hold the same spans"),
    "actor_rollout_ref.actor.router_replay.mode": (("disabled",), f"MoE router replay is {_LATER}"),
    "data.datagen.path": ((None,), f"dynamic data generation (verl's experimental DynamicGenDataset, whose dataset "
                                   "grows after every step; verl's August-2026 tree removed it) is "
                                   f"{_LATER}: the resumable loader's per-epoch order and checkpointed position "
                                   "assume a fixed dataset; generate the rows offline into data.train_files, or order "
                                   "existing rows with a curriculum sampler (data.sampler.class_path)"),
    "global_profiler.tool": ((None, "torch", "torch_memory", "nsys"), "Ascend NPU tools (npu, precision_debugger) "
                             "are not supported: hybridrl runs on NVIDIA GPUs and CPUs; use tool=nsys (Nsight "
                             "Systems), torch (torch.profiler traces) or torch_memory (CUDA allocator snapshots)"),
    "trainer.esi_redundant_time": ((0,), f"ESI pre-expiry checkpointing is {_LATER}"),
    "trainer.default_hdfs_dir": ((None,), f"HDFS checkpoint mirroring is {_LATER}"),
    "transfer_queue.enable": ((False,), f"the transfer queue is {_LATER}"),
    "critic.model.lora_rank": ((0,), "LoRA arrives in a later hybridrl release; use lora_rank=0 (full fine-tuning)"),
    "actor_rollout_ref.rollout.prometheus.enable": ((False,), f"Prometheus export is {_LATER}; engine statistics are the "
                                                              "rollout/* metrics of every step"),
    "actor_rollout_ref.rollout.enable_rollout_routing_replay": ((False,), f"MoE routing replay is {_LATER}"),
    "actor_rollout_ref.model.tiled_mlp.enabled": ((False,), f"tiled MLP is {_LATER}; bound activation memory with "
                                                            "enable_gradient_checkpointing and use_dynamic_bsz token budgets"),
    "actor_rollout_ref.rollout.logprobs_mode": (("processed_logprobs",), "the engine returns each sampled token's "
                                                "log-prob under logits / temperature, before top-k/top-p (what the "
                                                "trainer recomputes); other modes are not implemented"),
    "reward_model.reward_loop_module_path": ((None,), f"custom reward loops are {_LATER}; use "
                                                      "custom_reward_function.path with verl's compute_score signature, "
                                                      "or a reward-manager class (reward_manager.source=importlib)"),
    "reward_model.reward_loop_class_name": ((None,), f"custom reward loops are {_LATER}; use "
                                                     "custom_reward_function.path with verl's compute_score signature, "
                                                     "or a reward-manager class (reward_manager.source=importlib)"),
    **{key: ((1,), "sequence parallelism for the reward model is not implemented; the actor, reference and critic "
                   "support it")
       for key in ("reward_model.ulysses_sequence_parallel_size", "reward_model.model.fsdp_config.ulysses_sequence_parallel_size")},
    "reward_model.strategy": (("fsdp", "fsdp2"), _ENGINES),
    "actor_rollout_ref.hybrid_engine": ((True,), "only the hybrid engine exists (as in verl): keep hybrid_engine=true"),
    # Keys of verl's August-2026 tree (and its Megatron configs) whose features hybridrl does not have yet.
    "model_engine": (("dp",), _ENGINES),
    "trainer.v1.separate_async.hybrid_rollout.enable_switch": ((False,), f"lending the trainer's devices to the rollout "
                                                                         f"between steps (step switching) is {_LATER}"),
    "trainer.v1.sampler.custom_sampler.path": ((None,), f"custom replay-buffer samplers are {_LATER}; the asynchronous "
                                                        "modes sample with trainer.v1.sampler.max_off_policy_*"),
    **{f"skip.{target}.enable": ((False,), f"reusing cached generations (skip.{target}) is {_LATER}")
       for target in ("rollout", "rollout_tq", "async_rollout")},
    **{f"{role}.fsdp_config.qat.enable": ((False,), f"quantization-aware training (QAT) is {_LATER}")
       for role in (*FSDP_ROLES, "reward_model.model")},
    "actor_rollout_ref.actor.qat.enable": ((False,), f"quantization-aware training (QAT) is {_LATER}"),
    "actor_rollout_ref.actor.checkpoint.strict": ((True,), f"non-strict checkpoint loading is {_LATER}; checkpoints "
                                                           "load strictly"),
    "critic.checkpoint.strict": ((True,), f"non-strict checkpoint loading is {_LATER}; checkpoints load strictly"),
    "actor_rollout_ref.rollout.nnodes": ((0,), "a standalone rollout pool is configured here with "
                                               "actor_rollout_ref.rollout.device_ids (devices of its own); keep nnodes=0"),
    "actor_rollout_ref.rollout.full_determinism": ((False,), f"deterministic generation kernels are {_LATER}"),
    "actor_rollout_ref.rollout.moe_load_balance_metrics_interval": ((0,), f"MoE load-balance metrics are {_LATER}"),
    "actor_rollout_ref.rollout.disaggregation.enabled": ((False,), f"prefill/decode disaggregation is {_LATER}"),
    "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module": ((None,), f"custom weight-transfer backends are "
                                                                                   f"{_LATER}"),
    "global_profiler.finish_hook_cmd": ((None,), f"profiler finish hooks are {_LATER}"),
    "critic.model.use_liger": ((False,), f"Liger kernels are {_LATER}"),
    "critic.model.tiled_mlp.enabled": ((False,), f"tiled MLP is {_LATER}"),
    "critic.model.hf_config_path": ((None,), f"a separate config.json for the critic is {_LATER}; put it in critic.model.path"),
}

# Permanent refusals, unlike NOT_IMPLEMENTED: values naming software hybridrl replaces, features verl removed.
ENGINE_NAMES = ("auto", "hybrid", "hf", "vllm", "sglang", "trtllm")
REPLACED: dict[str, tuple[tuple[Any, ...], str]] = {
    "trainer.device": (("auto", "cuda", "cpu"), "hybridrl runs on NVIDIA GPUs (cuda) and CPUs; Ascend NPUs are out of "
                                                "scope: use trainer.device=cuda (or auto)"),
    "actor_rollout_ref.rollout.name": (
        ENGINE_NAMES,
        "hybridrl ships its own rollout engine: use actor_rollout_ref.rollout.name=hybrid (or hf, or auto; vllm, "
        "sglang and trtllm also mean hybridrl's engine); nothing to install",
    ),
}


# Keys only verl's legacy SGLang rollout read: accepted, but a value other than the default gets one warning line.
LEGACY_WARNINGS: dict[str, tuple[Any, str]] = {
    "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template": (
        False, "is read only by verl's legacy SGLang rollout; hybridrl's agent loop trains on exactly the tokens "
               "the model saw (continuous tokens), so it has no effect: remove it"),
    "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode": (
        "strict", "is read only by verl's legacy SGLang rollout; hybridrl's agent loop never re-tokenizes a "
                  "conversation, so there is nothing to check: remove it"),
    "actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts": (
        None, "is not used by verl's agent loop and has no effect here; set actor_rollout_ref.rollout.n for "
              "several trajectories per prompt"),
}


def legacy_warnings(values: dict[str, Any]) -> list[str]:
    """One line per LEGACY_WARNINGS key (`values`: path -> value) set to something other than its default."""
    return [f"{path}={values[path]!r} {why}" for path, (default, why) in LEGACY_WARNINGS.items()
            if values[path] != default]


def check_unsupported(tree: dict[str, Any]) -> list[str]:
    """One message per key of REPLACED or NOT_IMPLEMENTED whose value in `tree` (nested dicts) is refused."""
    problems = []
    extensible = REGISTRY_KEYS if os.environ.get("VERL_USE_EXTERNAL_MODULES", "").strip() else ()
    for table in (REPLACED, NOT_IMPLEMENTED):
        for path, (accepted, why) in table.items():
            try:
                value = get_in(tree, path)
            except KeyError:
                continue
            if value not in accepted and path not in extensible:
                problems.append(f"{path}={value!r}: {why}")
    return problems
