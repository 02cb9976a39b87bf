"""Rules of the asynchronous trainer modes (`trainer.v1.*`) and of rollout correction that span several keys.

Torch-free, so `print-config --validate` runs them; the threshold strings of `algorithm.rollout_correction`
are parsed by the trainer's own parser at preflight (trainer/correction.py), which knows every option.
"""

from __future__ import annotations

from hybridrl.config.estimator_needs import estimator_needs
from hybridrl.config.schema import HybridRLConfig

ASYNC_MODES = ("colocate_async", "separate_async")
_MODE = "trainer.v1.trainer_mode"


def is_async(cfg: HybridRLConfig) -> bool:
    return cfg.trainer.v1.trainer_mode in ASYNC_MODES


def async_problems(cfg: HybridRLConfig) -> list[str]:
    """Messages naming each key to change; none for the sync mode."""
    problems = _correction_problems(cfg) + _kept_kv_problems(cfg)
    if not is_async(cfg):
        return problems
    mode = cfg.trainer.v1.trainer_mode
    problems += _engine_problems(cfg, mode) + _algorithm_problems(cfg, mode)
    problems += _separate_problems(cfg) if mode == "separate_async" else _colocate_problems(cfg)
    return problems


def _correction_problems(cfg: HybridRLConfig) -> list[str]:
    correction, loss_mode = cfg.algorithm.rollout_correction, cfg.actor_rollout_ref.actor.policy_loss.loss_mode
    if correction.bypass_mode and loss_mode != "vanilla":
        return [f"algorithm.rollout_correction.bypass_mode=true replaces the policy loss (loss_type="
                f"{correction.loss_type}: {'PPO clipping of π_θ/π_rollout' if correction.loss_type == 'ppo_clip' else 'REINFORCE with the IS weights'}), "
                f"but actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r} asks for another; set loss_mode=vanilla, "
                "or bypass_mode=false (decoupled: the IS weights multiply that loss)"]
    return []


def _kept_kv_problems(cfg: HybridRLConfig) -> list[str]:
    """`recompute_kv_cache_after_weight_updates=false` keeps parked requests' KV across a weight update: only the
    asynchronous modes park requests (the sync trainer's generations finish before every update), and the kept
    KV is found through the prefix cache."""
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.recompute_kv_cache_after_weight_updates:
        return []
    if not is_async(cfg):
        return [f"actor_rollout_ref.rollout.recompute_kv_cache_after_weight_updates=false keeps the KV cache of "
                f"requests parked across a weight update, which only {_MODE}=colocate_async or separate_async parks "
                f"(now {cfg.trainer.v1.trainer_mode}); drop the key, or set one of those modes"]
    if not rollout.enable_prefix_caching:
        return ["actor_rollout_ref.rollout.recompute_kv_cache_after_weight_updates=false finds a resumed request's "
                "kept KV through the prefix cache, which actor_rollout_ref.rollout.enable_prefix_caching=false turns "
                "off; set enable_prefix_caching=true, or drop the first key"]
    return []


def _engine_problems(cfg: HybridRLConfig, mode: str) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    problems = []
    if rollout.name not in ("auto", "hybrid"):
        problems.append(f"{_MODE}={mode} generates with hybridrl's request-level engine (continuous batching, and an "
                        f"aborted request resumes exactly where it stopped); actor_rollout_ref.rollout.name="
                        f"{rollout.name!r} has no such engine: set rollout.name=hybrid (auto picks it, on CPU too)")
    if rollout.multi_turn.enable or rollout.agent.default_agent_loop != "single_turn_agent":
        problems.append(f"{_MODE}={mode} with agent loops (actor_rollout_ref.rollout.multi_turn.enable / "
                        "agent.default_agent_loop) is not implemented yet; use trainer_mode=sync for multi-turn runs")
    return problems


def _algorithm_problems(cfg: HybridRLConfig, mode: str) -> list[str]:
    problems = []
    estimator = cfg.algorithm.adv_estimator
    if estimator_needs(estimator).greedy_baseline:
        problems.append(f"algorithm.adv_estimator={estimator} scores a greedy response of each prompt with the "
                        f"current policy, which {_MODE}={mode} does not generate beside the groups in flight; use "
                        "grpo or rloo, or trainer_mode=sync")
    if cfg.algorithm.filter_groups.enable:
        problems.append(f"algorithm.filter_groups.enable=true (DAPO dynamic sampling) with {_MODE}={mode} is not "
                        "implemented yet; use trainer_mode=sync")
    return problems


def _separate_problems(cfg: HybridRLConfig) -> list[str]:
    arr, problems = cfg.actor_rollout_ref, []
    rollout_ids, actor_ids = arr.rollout.device_ids, arr.actor.device_ids
    if rollout_ids is None or actor_ids is None or set(rollout_ids) & set(actor_ids):
        problems.append(f"{_MODE}=separate_async generates on devices of the rollout's own while the actor trains: "
                        f"give both lists, disjoint, e.g. actor_rollout_ref.actor.device_ids=[0] "
                        f"actor_rollout_ref.rollout.device_ids=[1] (now actor {actor_ids}, rollout {rollout_ids}); "
                        "on shared devices use colocate_async")
    train, mini = cfg.data.train_batch_size, arr.actor.ppo_mini_batch_size
    sync_step = cfg.trainer.v1.separate_async.parameter_sync_step
    if mini and train % mini == 0 and sync_step != train // mini:
        problems.append(f"trainer.v1.separate_async.parameter_sync_step={sync_step} must be data.train_batch_size / "
                        f"actor_rollout_ref.actor.ppo_mini_batch_size = {train} / {mini} (verl's invariant: the "
                        f"optimizer steps between weight syncs); set parameter_sync_step={train // mini}")
    return problems


def _colocate_problems(cfg: HybridRLConfig) -> list[str]:
    ids = cfg.actor_rollout_ref.rollout.device_ids
    actor_ids = cfg.actor_rollout_ref.actor.device_ids
    if ids is not None and ids != actor_ids:
        return [f"{_MODE}=colocate_async generates on the actor's devices between its updates, but "
                f"actor_rollout_ref.rollout.device_ids={ids} gives the rollout devices of its own; set "
                f"trainer_mode=separate_async (generation then overlaps training) or drop the rollout's list"]
    return []
