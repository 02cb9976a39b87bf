"""The hybridrl side of the RL-step benchmark: `PPOTrainer` from verl overrides, instrumented per phase.

Two memory modes, each a fresh trainer:
- `hybrid`: the engine's KV cache exists only during generation (woken before `gen`, put to sleep
  after it), so training phases run without it. The engine still keeps its own bf16 weight copy.
- `separate`: the KV cache stays reserved from engine start through training (a rollout engine that
  does not share its memory, as a separate vLLM process would), `rollout.free_cache_engine=false`.
The wake/sleep wrapper is applied here so the comparison holds whether or not the trainer frees the
cache itself; an extra `sleep()` on a sleeping engine, or `wake_up()` on an awake one, is a no-op.
"""

from __future__ import annotations

import functools
import gc
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

MODES = ("hybrid", "hybrid_offload", "separate")
# hybrid_offload: hybrid plus the idle-state offloads a memory-bound user turns on (optimizer state on the CPU
# outside the optimizer step, the reference's parameters on the CPU between its forwards).
OFFLOAD = ("actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
           "actor_rollout_ref.ref.fsdp_config.param_offload=true")
# (role attribute of the trainer or None for the trainer itself, method, phase name)
PHASE_METHODS = ((None, "generate", "gen"), (None, "old_log_prob", "old_log_prob"),
                 ("reference", "compute_ref_log_prob", "ref"), ("actor", "update_actor", "update_actor"),
                 ("rollout", "sync_weights", "update_weights"))


def overrides(args, paths: dict[str, Path], mode: str) -> list[str]:
    """verl keys for the workload: GRPO + KL loss, one optimizer step over all responses per RL step."""
    rows = args.num_prompts * args.n
    arr = "actor_rollout_ref"
    profiled = int(profiles(args, mode))
    return [
        "algorithm.adv_estimator=grpo", f"data.train_files={paths['train']}", "data.val_files=[]",
        f"data.train_batch_size={args.num_prompts}", f"data.max_prompt_length={args.max_prompt_length}",
        f"data.max_response_length={args.response_length}", "data.shuffle=false",
        f"{arr}.model.path={paths['model']}", f"{arr}.model.tokenizer_path={paths['tokenizer']}",
        f"{arr}.model.enable_gradient_checkpointing={str(not args.no_grad_ckpt).lower()}",
        f"{arr}.actor.optim.lr={args.lr}", f"{arr}.actor.ppo_mini_batch_size={args.num_prompts}",
        f"{arr}.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}", f"{arr}.actor.use_kl_loss=true",
        f"{arr}.actor.kl_loss_coef={args.kl_coef}", f"{arr}.actor.kl_loss_type=low_var_kl",
        f"{arr}.actor.fsdp_config.model_dtype={args.train_dtype}", f"{arr}.ref.fsdp_config.model_dtype={args.train_dtype}",
        f"{arr}.rollout.name=hybrid", f"{arr}.rollout.n={args.n}", f"{arr}.rollout.ignore_eos=true",
        f"{arr}.rollout.gpu_memory_utilization={args.gpu_memory_utilization}", f"{arr}.rollout.max_num_seqs={rows}",
        f"{arr}.rollout.free_cache_engine={str(mode != 'separate').lower()}",
        f"{arr}.rollout.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
        f"{arr}.ref.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
        f"trainer.device={args.device}", "trainer.logger=[file]", f"trainer.total_training_steps={args.steps + profiled}",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.val_before_train=false",
        f"trainer.default_local_dir={paths['work'] / ('hybridrl_' + mode)}", f"trainer.seed={args.seed}",
        *(OFFLOAD if mode == "hybrid_offload" else ()), *profile_overrides(args, mode), *args.hybridrl_override,
    ]


def profile_overrides(args, mode: str) -> list[str]:
    """--profile DIR (hybrid mode): one extra step, profiled per phase in every process (global_profiler,
    discrete) and left out of the summary (the profiler slows it down)."""
    if not profiles(args, mode):
        return []
    return ["global_profiler.tool=torch", f"global_profiler.steps=[{args.steps + 1}]",
            f"global_profiler.save_path={args.profile}", "+global_profiler.global_tool_config.torch.discrete=true"]


def profiles(args, mode: str) -> bool:
    return bool(getattr(args, "profile", None)) and mode == "hybrid"


def _wrap(owner: Any, name: str, around: Callable[[], Any]) -> bool:
    """Run `owner.name(...)` inside the context manager `around()`; False when there is no such method."""
    method = getattr(owner, name, None) if owner is not None else None
    if method is None:
        return False

    @functools.wraps(method)
    def wrapped(*args, **kwargs):
        with around():
            return method(*args, **kwargs)

    setattr(owner, name, wrapped)
    return True


def instrument(trainer, tracker, mode: str) -> list[str]:
    """Per-phase peak memory on the trainer's phases (+ KV freed outside gen in hybrid mode)."""
    roles = trainer.roles  # hybrid mode: the trainer itself frees the KV cache outside gen (free_cache_engine)
    wrapped = []
    for role, method, phase in PHASE_METHODS:
        owner = trainer if role is None else getattr(roles, role, None)
        if _wrap(owner, method, functools.partial(tracker.phase, phase)):
            wrapped.append(phase)
    return wrapped


def record_steps(trainer, tracker) -> list[dict[str, float]]:
    """Each step's metrics, with the tracker's per-phase peaks (its overall peak replaces the trainer's)."""
    steps: list[dict[str, float]] = []
    run_step = trainer.run_step

    def recorded(prompts):
        metrics = run_step(prompts)
        for key, value in tracker.pop_metrics().items():  # with worker ranks the trainer's (ranks') peaks stand
            metrics[key] = max(metrics.get(key, 0.0), value)
        steps.append(dict(metrics))
        return metrics

    trainer.run_step = recorded
    return steps


def summarize(steps: list[dict[str, float]], warmup: int) -> dict[str, Any]:
    """Steady-state means (steps after `warmup`) of timings and throughput; max of memory peaks."""
    steady = steps[warmup:] or steps
    keys = [k for k in steady[0] if k.startswith(("timing_s/", "rollout/", "response_length/mean",
                                                  "prompt_length/mean", "actor/kl_loss", "actor/pg_loss",
                                                  "training/rollout_probs_diff", "training/rollout_log_probs_diff", "perf/update_weights"))]
    out: dict[str, Any] = {k: sum(s[k] for s in steady) / len(steady) for k in keys if k in steady[-1]}
    tokens = sum(s["perf/total_num_tokens"] for s in steady)
    seconds = sum(s["timing_s/step"] for s in steady)
    median = statistics.median(s["timing_s/step"] for s in steady)
    out.update({"steady_steps": [warmup + 1 + i for i in range(len(steady))], "step_s": seconds / len(steady),
                "tokens_per_step": tokens / len(steady), "tokens_per_s": tokens / seconds,
                # the median resists a one-off slow step (a recompile, a GC pause) that moves a short run's mean
                "step_s_median": median, "tokens_per_s_median": tokens / len(steady) / median,
                "step_s_all": [s["timing_s/step"] for s in steps]})
    memory = {k: max(s[k] for s in steady if k in s) for k in steady[-1] if k.startswith("perf/max_memory")}
    out["peak_memory_gb"] = memory
    return out


def device_total_gb(device) -> float | None:
    device = torch.device(device)
    return torch.cuda.get_device_properties(device).total_memory / 2**30 if device.type == "cuda" else None


def release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_plan(cfg, one_rank_group: bool):
    """The trainer's plan; --one-rank-group: a one-device run's roles in a one-rank worker group of the local
    launcher (a spawned process, as every rank of a multi-device run) instead of in the controller's process."""
    from dataclasses import replace

    from hybridrl.trainer.preflight import preflight

    plan = preflight(cfg)
    return replace(plan, launcher="local") if one_rank_group and plan.launcher == "in_process" else plan


def run(args, paths: dict[str, Path], mode: str) -> dict[str, Any]:
    """Build a PPOTrainer for `mode`, run `args.steps` steps, summarize steps after the warm-up."""
    from hybridrl.config import load_config
    from hybridrl.utils.memory import PhaseMemory
    from hybridrl.trainer.ppo_trainer import PPOTrainer

    start = time.perf_counter()
    cfg = load_config(overrides(args, paths, mode))
    trainer = PPOTrainer(cfg, run_plan(cfg, getattr(args, "one_rank_group", False)))
    build_s = time.perf_counter() - start
    tracker = PhaseMemory(trainer.device if not trainer.plan.on_ranks else "cpu")  # ranks measure themselves
    phases = instrument(trainer, tracker, mode)
    worker = trainer.roles.groups.local_worker  # one process: the engine lives here
    backend = worker.rollout.backend if worker is not None and worker.rollout is not None else None
    kv_gb = getattr(backend, "kv_cache_bytes", 0) / 2**30
    budget_blocks = getattr(backend, "kv_block_budget", None)  # what gpu_memory_utilization allows (CUDA)
    kv_budget_gb = budget_blocks * backend.runner.block_bytes / 2**30 if budget_blocks is not None else None
    steps = record_steps(trainer, tracker)
    trainer.fit()
    result = summarize(steps[:-1] if profiles(args, mode) else steps, args.warmup_steps)
    result.update({"build_s": build_s, "kv_cache_gb": kv_gb, "kv_budget_gb": kv_budget_gb,
                   "device_total_gb": device_total_gb(trainer.device), "phases_tracked": phases,
                   "kv_cache_during_training": mode == "separate"})
    del trainer, backend
    release_memory()
    return result
