"""validate_config: value rules across keys (batch sizes, algorithm needs, ranges, allowed values)."""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from hybridrl.config.async_rules import async_problems
from hybridrl.config.batch_rules import check_mini_batch, micro_batch_problems, token_budget_problems
from hybridrl.config.checkpoint_rules import checkpoint_content_problems
from hybridrl.config.correction_rules import threshold_text_problems
from hybridrl.config.data_rules import user_class_problems
from hybridrl.config.distillation_rules import distillation_problems
from hybridrl.config.dynamic_sampling_rules import filter_groups_problems
from hybridrl.config.numerics_rules import batch_invariant_problems
from hybridrl.config.errors import ConfigError
from hybridrl.config.estimator_needs import estimator_needs
from hybridrl.config.index import config_tree, get_in, schema_index
from hybridrl.config.placement import validate_placement
from hybridrl.config.precision import precision_problems
from hybridrl.config.profiler_rules import profiler_problems
from hybridrl.config.ranges import merged_range_problems, range_problems
from hybridrl.config.roles import critic_enabled, ref_enabled
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.schema_trainer import LOGGERS, RayKwargsConfig
from hybridrl.config.sequence_parallel import data_parallel
from hybridrl.config.sequence_parallel_rules import sequence_parallel_problems
from hybridrl.logging.backends import check_trace_backend_available
from hybridrl.logging.tracker import check_trackers_available

KL_ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def validate_config(cfg: HybridRLConfig, world_size: int = 1) -> None:
    """Check every rule; raise one ConfigError listing all problems (`world_size` = devices training the actor)."""
    if world_size < 1:  # validate_run reports the keys behind a count below 1; this is the Python API's guard
        raise ConfigError(f"world_size ({world_size}) must be >= 1: it is the number of ranks training the actor "
                          "(trainer.nnodes x trainer.n_gpus_per_node, or len(actor_rollout_ref.actor.device_ids))")
    # -- value ranges (config/ranges.py): values no rule below can compute with (NaN, inf, 2^40) stop here
    unusable = range_problems(cfg, unusable_only=True)
    if unusable:
        raise ConfigError(f"{len(unusable)} config problem(s):\n" + "\n".join(f"  - {p}" for p in unusable))
    # -- end of ranges
    problems = (
        _choice_problems(cfg)
        + _actor_batch_problems(cfg, world_size)
        + _log_prob_problems(cfg, world_size)
        + _critic_problems(cfg, world_size)
        + _algorithm_problems(cfg)
        + _sum_pi_squared_problems(cfg)
        + _sampling_problems(cfg)
        + _trainer_problems(cfg)
        + _ray_init_problems(cfg)
        + precision_problems(cfg)
        + token_budget_problems(cfg)
        + profiler_problems(cfg.global_profiler)
        + async_problems(cfg)
        + user_class_problems(cfg.data)
        + filter_groups_problems(cfg)
        + threshold_text_problems(cfg.algorithm.rollout_correction)
        + distillation_problems(cfg)
        + batch_invariant_problems(cfg)
        + sequence_parallel_problems(cfg, world_size)
    )
    # -- value ranges and checkpoint contents (config/ranges.py, config/checkpoint_rules.py)
    problems = merged_range_problems(cfg, problems)
    problems += checkpoint_content_problems(cfg)
    # -- end of ranges
    if problems:
        raise ConfigError(f"{len(problems)} config problem(s):\n" + "\n".join(f"  - {p}" for p in problems))


def validate_run(cfg: HybridRLConfig, device_type: str, num_devices: int, num_visible: int | None = None) -> None:
    """Every check `hybridrl train` makes before loading anything (torch-free: print-config --validate runs it
    too): device counts, the value rules with the actor's ranks, the placement, the loggers' packages.
    `num_devices`: the run's GPUs (on CPU gloo ranks); `num_visible`: GPUs visible here, when the run must fit.
    Raises one ConfigError naming every key to change."""
    counts = device_count_problems(cfg)
    if counts:  # the other rules divide by these counts
        raise ConfigError(f"{len(counts)} config problem(s):\n" + "\n".join(f"  - {p}" for p in counts))
    problems = []  # every check's, so one run names everything to change
    for check in (lambda: validate_config(cfg, world_size=actor_ranks(cfg, num_devices)),
                  lambda: validate_placement(cfg, num_devices, device_type=device_type, num_visible=num_visible)):
        try:
            check()
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError("\n".join(problems))
    check_trackers_available(cfg.trainer.logger)
    check_trace_backend_available(cfg.actor_rollout_ref.rollout.trace.backend)


def actor_ranks(cfg: HybridRLConfig, num_devices: int) -> int:
    """Ranks training the actor (what the batch-size rules divide by): its device list, else every device (an
    empty list counts as every device here: validate_placement reports it)."""
    ids = cfg.actor_rollout_ref.actor.device_ids
    return len(ids) if ids else num_devices


def _choice_problems(cfg: HybridRLConfig) -> list[str]:
    tree = config_tree(cfg)
    problems = []
    for spec in schema_index().values():
        value = get_in(tree, spec.path)
        if spec.choices is not None and value not in spec.choices:
            allowed = "|".join("null" if c is None else str(c) for c in spec.choices)
            problems.append(f"{spec.path}={value!r} is not one of {allowed}")
    for key in ("actor_rollout_ref.actor.kl_loss_type", "algorithm.kl_penalty"):
        value = get_in(tree, key)
        if value.removesuffix("+") not in KL_ESTIMATORS:
            problems.append(f"{key}={value!r} is not a KL estimator: use one of {'|'.join(KL_ESTIMATORS)} (+ suffix allowed)")
    unknown_loggers = [name for name in cfg.trainer.logger if name not in LOGGERS]
    if unknown_loggers:
        problems.append(f"trainer.logger has unknown backend(s) {unknown_loggers}; known: {', '.join(LOGGERS)}")
    return problems


def _actor_batch_problems(cfg: HybridRLConfig, world_size: int) -> list[str]:
    actor, n, train = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout.n, cfg.data.train_batch_size
    if train < 1:
        return [f"data.train_batch_size ({train}) must be >= 1"]
    if n < 1:
        return [f"actor_rollout_ref.rollout.n ({n}) must be >= 1"]
    problems = []
    dp = data_parallel(cfg, "actor", world_size)
    if (train * n) % dp.size:
        also = f" or {dp.sp_key}" if dp.sp > 1 else ""
        problems.append(
            f"data.train_batch_size x actor_rollout_ref.rollout.n ({train} x {n} = {train * n} rows) must be divisible "
            f"by {dp.divisor()}; change data.train_batch_size or the device count{also}"
        )
    prefix = "actor_rollout_ref.actor.ppo_micro_batch_size"
    micro, micro_problems = micro_batch_problems(
        (actor.ppo_micro_batch_size, actor.ppo_micro_batch_size_per_gpu), dp, prefix,
        "actor_rollout_ref.actor.use_dynamic_bsz", actor.use_dynamic_bsz,
    )  # fmt: skip
    micro_key = None if actor.use_dynamic_bsz else prefix + "_per_gpu"
    problems += micro_problems
    problems += check_mini_batch(
        train, actor.ppo_mini_batch_size, n, dp, "actor_rollout_ref.actor.ppo_mini_batch_size", micro, micro_key
    )
    return problems


def _log_prob_problems(cfg: HybridRLConfig, world_size: int) -> list[str]:
    """The old-log-prob forward is the actor's (its shards), the reference's its own."""
    rollout, ref = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.ref
    roles: list[tuple[str, Any, str]] = [("rollout", rollout, "actor")] + \
        ([("ref", ref, "ref")] if ref_enabled(cfg) else [])
    problems = []
    for name, role, model in roles:
        _, found = micro_batch_problems(
            (role.log_prob_micro_batch_size, role.log_prob_micro_batch_size_per_gpu),
            data_parallel(cfg, model, world_size), f"actor_rollout_ref.{name}.log_prob_micro_batch_size",
            f"actor_rollout_ref.{name}.log_prob_use_dynamic_bsz", role.log_prob_use_dynamic_bsz,
        )  # fmt: skip
        problems += found
    return problems


def _critic_problems(cfg: HybridRLConfig, world_size: int) -> list[str]:
    """The critic's rules over its own ranks (critic.device_ids, else the actor's `world_size`)."""
    if not critic_enabled(cfg):
        return []
    critic = cfg.critic
    dp = data_parallel(cfg, "critic", world_size)
    micro, problems = micro_batch_problems(
        (critic.ppo_micro_batch_size, critic.ppo_micro_batch_size_per_gpu), dp,
        "critic.ppo_micro_batch_size", "critic.use_dynamic_bsz", critic.use_dynamic_bsz,
    )  # fmt: skip
    if critic.forward_micro_batch_size is not None and critic.forward_micro_batch_size_per_gpu is not None:
        problems.append(
            f"critic.forward_micro_batch_size ({critic.forward_micro_batch_size}) and "
            f"critic.forward_micro_batch_size_per_gpu ({critic.forward_micro_batch_size_per_gpu}) are both set; set only "
            "critic.forward_micro_batch_size_per_gpu"
        )
    micro_key = None if critic.use_dynamic_bsz else "critic.ppo_micro_batch_size_per_gpu"
    problems += check_mini_batch(
        cfg.data.train_batch_size, critic.ppo_mini_batch_size, critic.rollout_n, dp,
        "critic.ppo_mini_batch_size", micro, micro_key,
    )  # fmt: skip
    if critic.optim.lr < 0:
        problems.append(f"critic.optim.lr ({critic.optim.lr}) must be >= 0")
    return problems


def _algorithm_problems(cfg: HybridRLConfig) -> list[str]:
    estimator, rollout = cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.rollout
    problems = []  # a group estimator with rollout.n=1 runs as in verl, with a warning (notices.py)
    if estimator_needs(estimator).greedy_baseline and not rollout.do_sample:
        problems.append(
            f"algorithm.adv_estimator={estimator} needs actor_rollout_ref.rollout.do_sample=true: its baseline is a greedy "
            "response, so with greedy sampling every advantage is 0"
        )
    if cfg.actor_rollout_ref.actor.optim.lr < 0:
        problems.append(f"actor_rollout_ref.actor.optim.lr ({cfg.actor_rollout_ref.actor.optim.lr}) must be >= 0")
    if cfg.actor_rollout_ref.actor.clip_ratio_c <= 1:
        problems.append(f"actor_rollout_ref.actor.clip_ratio_c ({cfg.actor_rollout_ref.actor.clip_ratio_c}) must be > 1")
    return problems


def _sum_pi_squared_problems(cfg: HybridRLConfig) -> list[str]:
    """The optimal token baseline's W_t sums 1 − 2π + Σπ² over tokens; Σπ² comes from the actor's old-log-prob pass
    only with calculate_sum_pi_squared (verl asserts the same at its advantage step, after a whole rollout)."""
    estimator = cfg.algorithm.adv_estimator
    if not estimator_needs(estimator).sum_pi_squared:
        return []
    problems = []
    if not cfg.actor_rollout_ref.actor.calculate_sum_pi_squared:
        problems.append(
            f"algorithm.adv_estimator={estimator} needs actor_rollout_ref.actor.calculate_sum_pi_squared=true (got "
            "false): its token baseline weighs each token by 1 - 2*pi + sum(pi^2), which the actor's old-log-prob "
            "forward computes only with that key; add actor_rollout_ref.actor.calculate_sum_pi_squared=True"
        )
    if cfg.algorithm.rollout_correction.bypass_mode:
        problems.append(
            f"algorithm.adv_estimator={estimator} cannot run with algorithm.rollout_correction.bypass_mode=true: bypass "
            "mode skips the actor's old-log-prob forward, the one that computes sum(pi^2) for the token baseline; set "
            "bypass_mode=false (decoupled correction: its IS weights reach the baseline as in verl)"
        )
    return problems


def _sampling_problems(cfg: HybridRLConfig) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    val = rollout.val_kwargs
    problems = []
    if val.do_sample and val.temperature <= 0:
        problems.append(
            f"actor_rollout_ref.rollout.val_kwargs.do_sample=true needs val_kwargs.temperature > 0 (got {val.temperature}); "
            "set val_kwargs.temperature=1.0 or val_kwargs.do_sample=false"
        )
    if val.n < 1:
        problems.append(f"actor_rollout_ref.rollout.val_kwargs.n ({val.n}) must be >= 1")
    if not 0 < rollout.gpu_memory_utilization <= 1:
        problems.append(f"actor_rollout_ref.rollout.gpu_memory_utilization ({rollout.gpu_memory_utilization}) must be in (0, 1]")
    if rollout.temperature < 0:
        problems.append(f"actor_rollout_ref.rollout.temperature ({rollout.temperature}) must be >= 0")
    if not 0 < rollout.top_p <= 1:
        problems.append(f"actor_rollout_ref.rollout.top_p ({rollout.top_p}) must be in (0, 1]")
    return problems


def _trainer_problems(cfg: HybridRLConfig) -> list[str]:
    trainer = cfg.trainer
    problems = []
    if trainer.critic_warmup < 0:
        problems.append(f"trainer.critic_warmup ({trainer.critic_warmup}) must be >= 0")
    if trainer.resume_mode == "resume_path":
        path = trainer.resume_from_path
        if not path or "global_step_" not in path:
            problems.append(
                f"trainer.resume_mode=resume_path needs trainer.resume_from_path pointing at a checkpoint folder "
                f"named global_step_N (got {path!r})"
            )
    if trainer.val_only and trainer.val_before_train and not cfg.data.val_files:
        problems.append("trainer.val_only=true validates once and stops, but data.val_files is empty; set "
                        "data.val_files to the validation data")
    problems += device_count_problems(cfg)
    if trainer.launcher == "local" and trainer.nnodes > 1:
        problems.append(f"trainer.launcher=local runs on one node but trainer.nnodes={trainer.nnodes}; set "
                        "trainer.launcher=ray (or auto) for several nodes, or trainer.nnodes=1")
    if cfg.reward_model.num_workers < 1:
        problems.append(f"reward_model.num_workers ({cfg.reward_model.num_workers}) must be >= 1 (1 = score in the "
                        "trainer's process)")
    return problems


def device_count_problems(cfg: HybridRLConfig) -> list[str]:
    """trainer.nnodes and trainer.n_gpus_per_node: every rule about ranks divides by them."""
    trainer = cfg.trainer
    problems = []
    if trainer.nnodes < 1:
        problems.append(f"trainer.nnodes ({trainer.nnodes}) must be >= 1; set trainer.nnodes=1 for one machine")
    if trainer.n_gpus_per_node is not None and trainer.n_gpus_per_node < 1:
        problems.append(f"trainer.n_gpus_per_node ({trainer.n_gpus_per_node}) must be >= 1; set it to the devices "
                        "to use per node, or null (= all visible GPUs, 1 on CPU)")
    return problems


def _ray_init_problems(cfg: HybridRLConfig) -> list[str]:
    """ray_kwargs.ray_init is an open dict handed to ray.init: a misspelt key would only fail when Ray starts.
    Keys starting with `_` are Ray's private options; a Ray client address (ray://) takes the client's own."""
    ray_init = cfg.ray_kwargs.ray_init or {}
    defaults = RayKwargsConfig().ray_init  # ray.init's own: the default config imports no Ray
    keys = [key for key in ray_init if not str(key).startswith("_") and key not in defaults]
    if not keys or str(ray_init.get("address") or "").startswith("ray://"):
        return []
    parameters = _ray_init_parameters()
    if parameters is None:  # no Ray: the launcher says how to install it if the run needs it
        return []
    return [_unknown_ray_init_key(key, parameters) for key in keys if key not in parameters]


def _ray_init_parameters() -> list[str] | None:
    """ray.init's keyword names, or None without Ray. (Ray is otherwise imported only by
    distributed/ray_launcher.py, a layer above config.)"""
    try:
        import ray
    except ImportError:
        return None
    return [name for name, parameter in inspect.signature(ray.init).parameters.items()
            if parameter.kind is not parameter.VAR_KEYWORD]


def _unknown_ray_init_key(key: str, parameters: list[str]) -> str:
    close = difflib.get_close_matches(str(key), parameters, n=1, cutoff=0.75)
    hint = f"did you mean 'ray_kwargs.ray_init.{close[0]}'?" if close else f"ray.init takes {', '.join(parameters)}"
    return f"ray_kwargs.ray_init.{key} is not an argument of ray.init; {hint}"
