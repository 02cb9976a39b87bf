"""The run's plan, after every check that needs no model: done first, before the trainer's heavy imports.

`hybridrl train` with a bad key or an impossible placement answers after importing torch (~4 s on a 2-core
box), not after transformers and every worker module (~13 s). The checks are `config.validate.validate_run`
(torch-free, so `print-config --validate` runs them too); here this machine's device, device counts and
launcher are resolved, and the result is the one `RunPlan` the trainer and its ranks read.
"""

from __future__ import annotations

import torch

from hybridrl.config import ConfigError, HybridRLConfig
from hybridrl.config.estimator_needs import ESTIMATOR_NEEDS, EstimatorNeeds, add_estimator_needs
from hybridrl.config.run_plan import RunPlan, build_run_plan
from hybridrl.config.validate import validate_run


def preflight(cfg: HybridRLConfig) -> RunPlan:
    """Validate `cfg` (device counts, batch sizes against the actor's ranks, device lists, tensor parallelism,
    launcher, loggers) for this machine and plan the run; raises ConfigError naming the keys to change."""
    describe_registered_estimator(cfg.algorithm.adv_estimator)
    launcher = configured_launcher_or_local(cfg)
    on_ray = launcher == "ray"
    device = resolve_device(cfg.trainer.device, on_ray)
    if on_ray and device.type == "cuda" and not torch.cuda.is_available():
        check_driver_without_gpu(cfg)
    num_devices = world_size(cfg, device.type)
    validate_run(cfg, device.type, num_devices, None if on_ray else visible_gpus(cfg, device.type))
    # One rank and no Ray: the roles run in this process. Ray asked for (trainer.launcher=ray, several nodes or
    # a Ray address) starts ranks even for one device, e.g. a driver on a CPU head node sending a one-GPU job.
    in_process = num_devices == 1 and not on_ray
    return build_run_plan(cfg, device=device.type, world_size=num_devices,
                          launcher="in_process" if in_process else launcher)


def describe_registered_estimator(name: str) -> None:
    """A user's estimator (VERL_USE_EXTERNAL_MODULES) is not in config's torch-free table of needs: add its
    registry spec there, so the plan starts a critic or samples a greedy baseline when it asks for one."""
    if name in ESTIMATOR_NEEDS:
        return
    from hybridrl.algorithms.estimators import registered_spec

    spec = registered_spec(name)
    if spec is not None:
        add_estimator_needs(name, EstimatorNeeds(critic=spec.needs_critic, greedy_baseline=spec.needs_greedy_baseline,
                                                 groups=spec.needs_groups,
                                                 sum_pi_squared=spec.needs_sum_pi_squared))


def configured_launcher_or_local(cfg: HybridRLConfig) -> str:
    """`configured_launcher`: "local" or "ray". trainer.launcher=local on several nodes is refused by
    validate_run, which names the keys; until then it reads as local."""
    from hybridrl.distributed.launcher_choice import configured_launcher

    try:
        return configured_launcher(cfg)
    except ValueError:
        return "local"


def resolve_device(name: str, on_ray: bool = False) -> torch.device:
    """The ranks' device type. With Ray the driver may have no GPU: Ray places the ranks on GPU nodes."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available() and not on_ray:
        raise ConfigError("trainer.device=cuda but no CUDA device is visible; set trainer.device=cpu (or auto), or "
                          "start the ranks on a cluster's GPU nodes with Ray (trainer.launcher=ray)")
    return torch.device(name)


def check_driver_without_gpu(cfg: HybridRLConfig) -> None:
    """A Ray driver without a GPU (e.g. a CPU head node): the ranks get GPUs, the controller's own process none."""
    from hybridrl.config.role_devices import is_remote, reward_model_ids

    problems = []
    if cfg.trainer.n_gpus_per_node is None:
        problems.append("trainer.n_gpus_per_node is null (= the GPUs this node sees) but this driver sees none; set "
                        "it to the GPUs per node the ranks get")
    rm = cfg.reward_model
    if rm.enable and not is_remote(rm.type, rm.model.path):
        listed = f" (reward_model.device_ids={reward_model_ids(cfg)})" if rm.device_ids is not None else ""
        problems.append(f"the in-process reward model runs in the driver's process{listed}, which sees no GPU: start "
                        "the driver on a GPU node, or serve the reward model (hybridrl serve) and point "
                        "reward_model.model.path at its URL")
    if problems:
        raise ConfigError("trainer.device=cuda with Ray on a driver without a GPU:\n" + "\n".join(
            f"  - {p}" for p in problems))


def world_size(cfg: HybridRLConfig, device_type: str) -> int:
    """`trainer.nnodes x trainer.n_gpus_per_node`; n_gpus_per_node null = the visible GPUs (1 on CPU)."""
    per_node = cfg.trainer.n_gpus_per_node
    if per_node is None:
        per_node = max(torch.cuda.device_count(), 1) if device_type == "cuda" else 1
    return cfg.trainer.nnodes * per_node


def visible_gpus(cfg: HybridRLConfig, device_type: str) -> int | None:
    """The GPUs this node sees, which a one-node CUDA run must fit; None where that is not checked here: on CPU
    (a rank is a gloo process: any number share the cores) and on several nodes (Ray places the pools)."""
    from hybridrl.distributed.placement import num_visible_devices

    if device_type != "cuda" or cfg.trainer.nnodes != 1:
        return None
    return num_visible_devices(device_type)
