"""The start banner: what this run is about to do, on one screen (model, parameters, devices and placement,
data sizes, algorithm, effective batch sizes, the memory plan, where outputs go).

`run_facts` reads the run's config by attribute (verl's key names; this leaf package imports no config code) and
the few numbers only the trainer knows (rows, steps, the roles it needs); `format_banner` lays them out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

BYTES_PER_TRAINED_PARAMETER = 16  # fp32 master weight 4 + gradient 4 + AdamW's two moments 8


@dataclass(frozen=True)
class RunFacts:
    """Everything the banner (and the end summary) says about a run."""

    title: str
    model: str
    num_parameters: int | None
    lora_rank: int
    devices: str
    placement: str
    algorithm: str
    data: str
    steps: str
    batch: str
    memory: list[str] = field(default_factory=list)
    output_dir: str = ""
    total_steps: int = 0
    start_step: int = 0


def model_parameters(path: str) -> int | None:
    """Parameters of the HF model at `path`, counted on the meta device (nothing is loaded); None when unknown."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(os.path.expanduser(path))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())  # tied weights once
    except Exception:  # noqa: BLE001 - a Megatron folder, a remote model, a custom class: the banner says "unknown"
        return None


def human_count(count: int | None) -> str:
    if count is None:
        return "unknown size"
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= scale:
            return f"{count / scale:.3g}{suffix} parameters"
    return f"{count} parameters"


def human_bytes(num_bytes: float) -> str:
    for scale, suffix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.3g} {suffix}"
    return f"{num_bytes:.0f} B"


def placement_text(cfg: Any, device_type: str, num_devices: int) -> str:
    """Which roles share which devices: verl's colocated default, or the per-role `device_ids` lists."""
    arr = cfg.actor_rollout_ref
    lists = {"actor": arr.actor.device_ids, "rollout": arr.rollout.device_ids, "reference": arr.ref.device_ids,
             "critic": cfg.critic.device_ids}
    named = {role: ids for role, ids in lists.items() if ids is not None}
    if not named:
        return f"colocated: every role on all {num_devices} {device_type} device(s), taking turns (hybrid engine)"
    return "; ".join(f"{role} on {ids}" for role, ids in named.items()) + "; roles not listed follow the actor"


def memory_plan(cfg: Any, num_parameters: int | None, needs_critic: bool, needs_reference: bool,
                device_type: str, num_devices: int) -> list[str]:
    """Per-role memory, estimated from the parameter count (fp32 training state, compute-dtype copies)."""
    if num_parameters is None:
        return ["unknown: the model's parameter count could not be read"]
    arr = cfg.actor_rollout_ref
    shards = f" over {num_devices} ranks" if num_devices > 1 else ""
    trained = num_parameters * BYTES_PER_TRAINED_PARAMETER
    offload = [name for name, on in (("parameters", arr.actor.fsdp_config.param_offload),
                                     ("optimizer state", arr.actor.fsdp_config.optimizer_offload)) if on]
    dtype_bytes = 2 if device_type == "cuda" else 4
    if arr.model.lora_rank:  # only the adapter trains; the reference is the base with the adapter disabled
        return [f"actor: {human_bytes(num_parameters * dtype_bytes)}{shards} of frozen base weights plus the LoRA "
                f"adapter's training state (rank {arr.model.lora_rank}); the reference shares the base weights"]
    policy = "; on the CPU (fsdp_config.offload_policy)"
    lines = [f"actor: {human_bytes(trained)}{shards} (fp32 weights, gradients, AdamW)"
             + (policy if arr.actor.fsdp_config.offload_policy else
                f"; {' and '.join(offload)} on the CPU between phases" if offload else "")]
    if needs_reference:
        where = " (on the CPU: fsdp_config.offload_policy)" if arr.ref.fsdp_config.offload_policy else \
            " (on the CPU between phases)" if arr.ref.fsdp_config.param_offload else ""
        lines.append(f"reference: {human_bytes(num_parameters * dtype_bytes)}{shards}{where}")
    if needs_critic:
        lines.append(f"critic: about {human_bytes(trained)}{shards} (same estimate as the actor)")
    if device_type == "cuda":
        rollout = arr.rollout
        freed = "freed after each generation" if rollout.free_cache_engine else "kept between generations"
        lines.append(f"rollout KV cache: up to {rollout.gpu_memory_utilization:.0%} of each GPU while generating, "
                     f"{freed}")
    return lines


def _batch_text(cfg: Any) -> str:
    arr = cfg.actor_rollout_ref
    prompts, n = cfg.data.train_batch_size, arr.rollout.n
    mini = arr.actor.ppo_mini_batch_size
    updates = max(1, prompts // mini) * arr.actor.ppo_epochs if mini else 1
    if arr.actor.use_dynamic_bsz:
        micro = f"micro-batches of {arr.actor.ppo_max_token_len_per_gpu} tokens per device"
    else:
        micro = f"micro-batch {arr.actor.ppo_micro_batch_size_per_gpu} sequences per device"
    return (f"{prompts} prompts x {n} samples = {prompts * n} sequences per step; mini-batch {mini} prompts "
            f"({updates} optimizer step(s) per step); {micro}")


def _data_text(train_rows: int, val_rows: int | None, prompt_lengths: Sequence[int]) -> str:
    lengths = f" (prompt tokens max {max(prompt_lengths)}, mean {sum(prompt_lengths) / len(prompt_lengths):.0f})" \
        if prompt_lengths else ""
    val = f", validation {val_rows} prompts" if val_rows is not None else ", no validation set"
    return f"train {train_rows} prompts{lengths}{val}"


def run_facts(cfg: Any, *, needs_critic: bool, needs_reference: bool, device_type: str, num_devices: int,
              rollout_backend: str,
              train_rows: int, val_rows: int | None, prompt_lengths: Sequence[int], steps_per_epoch: int,
              total_steps: int, start_step: int, output_dir: str, version: str = "") -> RunFacts:
    """The banner's facts for `cfg` and the numbers the trainer knows."""
    arr, trainer = cfg.actor_rollout_ref, cfg.trainer
    params = model_parameters(arr.model.path)
    kl = (f"KL loss {arr.actor.kl_loss_type} x {arr.actor.kl_loss_coef}" if arr.actor.use_kl_loss else
          "KL in the reward" if cfg.algorithm.use_kl_in_reward else "no KL term")
    roles = [name for name, on in (("critic", needs_critic), ("reference", needs_reference)) if on]
    roles += [_distillation_text(cfg.distillation)] if cfg.distillation.enabled else []
    start = f", resuming after step {start_step}" if start_step else ""
    return RunFacts(
        title=f"hybridrl {version} | {cfg.algorithm.adv_estimator} | {trainer.project_name}/{trainer.experiment_name}",
        model=arr.model.path, num_parameters=params, lora_rank=arr.model.lora_rank,
        devices=f"{device_type} x {num_devices}, rollout backend {rollout_backend}",
        placement=placement_text(cfg, device_type, num_devices),
        algorithm=(f"{cfg.algorithm.adv_estimator}, {kl}, roles: actor, rollout"
                   + "".join(f", {r}" for r in roles) + f"; loss_agg_mode {arr.actor.loss_agg_mode}"),
        data=_data_text(train_rows, val_rows, prompt_lengths),
        steps=f"{total_steps} training steps ({steps_per_epoch} per epoch){start}",
        batch=_batch_text(cfg),
        memory=memory_plan(cfg, params, needs_critic, needs_reference, device_type, num_devices),
        output_dir=output_dir, total_steps=total_steps, start_step=start_step)


def _distillation_text(dist: Any) -> str:
    loss = dist.distillation_loss
    how = " as a policy-gradient reward" if loss.use_policy_gradient else ""
    task = "" if loss.use_task_rewards else ", no task rewards"
    teachers = sum(1 for entry in dist.teacher_models.values() if (entry or {}).get("model_path"))
    return f"{teachers} distillation teacher(s) ({loss.loss_mode}{how}{task})"


def format_banner(facts: RunFacts) -> str:
    lora = f", LoRA rank {facts.lora_rank} (only the adapter trains)" if facts.lora_rank else ""
    rows = [("model", f"{facts.model} ({human_count(facts.num_parameters)}{lora})"), ("devices", facts.devices),
            ("placement", facts.placement), ("algorithm", facts.algorithm), ("data", facts.data),
            ("steps", facts.steps), ("batch", facts.batch)]
    rows += [("memory" if i == 0 else "", line) for i, line in enumerate(facts.memory)]
    rows.append(("outputs", facts.output_dir))
    rule = "=" * min(100, max(len(facts.title), 40))
    return "\n".join([rule, facts.title, rule] + [f"  {label:<10} {text}" for label, text in rows] + [rule])
