"""Checks of a run's configuration that need no model: done first, before the trainer's heavy imports.

`hybridrl train` with a bad key or an impossible placement answers after importing torch (~4 s on a 2-core
box), not after transformers and every worker module (~13 s). `PPOTrainer` runs the same checks, so code
that builds a trainer directly gets the same errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hybridrl.config import ConfigError, validate_config


@dataclass(frozen=True)
class RunShape:
    device: torch.device  # where the controller's roles run (the worker ranks pick their own GPUs)
    num_devices: int  # ranks in all: trainer.nnodes x trainer.n_gpus_per_node
    actor_ranks: int  # ranks training the actor: what the batch-size rules divide by


def preflight(cfg, num_devices: int | None = None) -> RunShape:
    """Validate `cfg` (batch sizes against the actor's ranks, device lists, tensor parallelism, loggers);
    raises ConfigError naming the keys to change. `num_devices` overrides nnodes x n_gpus_per_node."""
    from hybridrl.logging.tracker import check_trackers_available

    device = resolve_device(cfg.trainer.device)
    num_devices = num_devices or world_size(cfg, device.type)
    actor_ranks = actor_world_size(cfg, num_devices)
    problems = []  # every check's, so one run names everything to change
    for check in (lambda: validate_config(cfg, world_size=actor_ranks),
                  lambda: check_placement(cfg, device.type, num_devices)):
        try:
            check()
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError("\n".join(problems))
    check_trackers_available(cfg.trainer.logger)
    return RunShape(device, num_devices, actor_ranks)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but no CUDA device is visible; set trainer.device=cpu (or auto)")
    return torch.device(name)


def world_size(cfg, device_type: str) -> int:
    """`trainer.nnodes x trainer.n_gpus_per_node`; n_gpus_per_node null = the visible GPUs (1 on CPU)."""
    per_node = cfg.trainer.n_gpus_per_node
    if per_node is None:
        per_node = max(torch.cuda.device_count(), 1) if device_type == "cuda" else 1
    return cfg.trainer.nnodes * per_node


def actor_world_size(cfg, num_ranks: int) -> int:
    """Ranks training the actor (what the batch-size rules divide by): its device list, else every rank."""
    ids = cfg.actor_rollout_ref.actor.device_ids
    return len(ids) if ids is not None else num_ranks


def check_placement(cfg, device_type: str, num_ranks: int) -> None:
    """Placement errors before any worker starts: device counts and `*.device_ids` lists.

    On CPU a rank is a gloo process, not a device: any number of ranks may share the cores, and
    `*.device_ids` index ranks. Several nodes (Ray) are checked by Ray when it places the pools.
    """
    from hybridrl.config import validate_placement
    from hybridrl.distributed.placement import num_visible_devices
    from hybridrl.rollout import resolve_backend_name

    rollout = cfg.actor_rollout_ref.rollout
    if rollout.tensor_model_parallel_size > 1 and resolve_backend_name(rollout.name, device_type) == "hf":
        raise ConfigError(f"actor_rollout_ref.rollout.tensor_model_parallel_size={rollout.tensor_model_parallel_size} "
                          f"needs the hybrid engine (rollout.name={rollout.name} is the hf backend on {device_type}); "
                          "set actor_rollout_ref.rollout.name=hybrid")
    if cfg.trainer.nnodes == 1:
        visible = num_visible_devices(device_type)
        validate_placement(cfg, max(visible, num_ranks) if device_type == "cpu" else visible)
