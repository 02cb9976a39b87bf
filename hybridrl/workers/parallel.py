"""How a role's model is spread over its group's ranks: `parallelize` returns one of three strategies.

- `SingleDevice`: the whole model on this rank's device and no other rank's (one process, a one-rank group).
- `Replicas` (a role's `fsdp_config.fsdp_size=1` on several ranks): a whole copy on every rank, gradients
  averaged over the ranks before each optimizer step (`distributed.replicas.GradientAverager`). A model whose
  weights, gradients and optimizer state fit on one device gains nothing from sharding and pays for it.
- `FullyShardedStrategy` (FSDP2, verl's default `fsdp_size=-1`; hybrid sharding for a divisor): parameters,
  gradients and optimizer state sharded over the ranks (`distributed.fsdp`). With `fsdp_config.offload_policy`
  (FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer state on the CPU, the optimizer stepping
  there) every group of ranks uses it, as verl does: `fsdp_size=1` then means shard groups of one rank (HSDP
  with whole parameters per rank) and a one-rank group shards over itself. Without a process group (one
  device, in the trainer's process) the model stays `SingleDevice` and `trainable.phase_offloads` says what
  happens instead.

A role asks its strategy, never a flag, how to do what differs: the autocast around a forward (FSDP2 casts
itself), skipping the gradient reduce of all but the last micro-batch's backward, completing and clipping the
gradients, agreeing with the other ranks on a micro-batch count, the full (unsharded) state dicts in the
one-process layout (model: `{name: tensor}`; optimizer: `torch.optim` layout with integer parameter indices,
so a checkpoint saved by N ranks loads on M ranks or in one process), and the full weights for a rollout.
Every collective must be called on all ranks of the group in the same order.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from hybridrl.logging.log import get_logger
from hybridrl.utils.collectives import all_reduce_int, is_rank0, rank_and_world_size
from hybridrl.workers.precision import Precision

log = get_logger("workers.parallel")


class ParallelStrategy(Protocol):
    name: str  # for the log line and messages
    single_device: bool  # the whole model is here and no other rank's: a rollout beside it may share the module
    offloads_to_cpu: bool  # FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer state live on the CPU

    def autocast(self) -> AbstractContextManager: ...

    def backward_sync(self, last: bool) -> AbstractContextManager:
        """Around each micro-batch's backward of an optimizer step: the gradient reduce happens in the last."""
        ...

    def finish_gradients(self) -> None:
        """After the last backward: the gradients are then complete (and equal on every rank)."""
        ...

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Clip the total gradient norm (over every shard) to `max_norm`; the norm before clipping, as a tensor."""
        ...

    def max_over_ranks(self, value: int) -> int:
        """The largest `value` of the ranks that must run as many forwards (collective under FSDP2)."""
        ...

    def model_state(self) -> dict[str, torch.Tensor]: ...

    def load_model_state(self, state: dict[str, torch.Tensor]) -> None: ...

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict: ...

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None: ...

    def named_weights(self, dtype: torch.dtype | None = None) -> Iterable[tuple[str, torch.Tensor]]:
        """(HF name, full tensor) pairs, tied parameters once (as `named_parameters` reports them); in `dtype`
        where that saves gathering bytes the receiver drops (consumers cast whatever they get)."""
        ...

    def weight_units(self) -> Iterable[list[str]]:
        """Parameter names in units whose parameters are whole while the unit is current (LoRA merges one unit at
        a time): every parameter at once, or one FSDP unit at a time (collective: exhaust it on every rank)."""
        ...


class _WholeModel:
    """Shared by the strategies that keep the whole model on every rank (`SingleDevice`, `Replicas`)."""

    name = "whole model"
    single_device = True
    offloads_to_cpu = False

    def __init__(self, model: nn.Module, precision: Precision) -> None:
        self.model, self.precision = model, precision

    def autocast(self) -> AbstractContextManager:
        return self.precision.autocast()

    def backward_sync(self, last: bool) -> AbstractContextManager:
        return contextlib.nullcontext()

    def finish_gradients(self) -> None:
        pass

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)

    def max_over_ranks(self, value: int) -> int:
        return value  # forwards are not collectives here: ranks may run different counts

    def model_state(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    def load_model_state(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        return optimizer.state_dict()

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)

    def named_weights(self, dtype: torch.dtype | None = None) -> Iterable[tuple[str, torch.Tensor]]:
        return ((name, param.detach()) for name, param in self.model.named_parameters())

    def weight_units(self) -> Iterable[list[str]]:
        return [[name for name, _ in self.model.named_parameters()]]


class SingleDevice(_WholeModel):
    """The whole model on this rank's device, no other rank holding it: plain torch, `torch.autocast` for mixed
    precision."""

    name = "single device"


class Replicas(_WholeModel):
    """A whole copy on each of the group's ranks; every gradient becomes its mean over the ranks as FSDP's
    reduce would, bucketed all-reduces started while the last backward still runs (as DDP's buckets)."""

    name = "replicas"
    single_device = False

    def __init__(self, model: nn.Module, precision: Precision) -> None:
        from hybridrl.distributed.replicas import GradientAverager

        super().__init__(model, precision)
        self.averager = GradientAverager(model.parameters(), precision.reduce)

    def backward_sync(self, last: bool) -> AbstractContextManager:
        return self.averager.overlapping(last)

    def finish_gradients(self) -> None:
        self.averager.finish()


class FullyShardedStrategy:
    """FSDP2 over the group's ranks: one unit per decoder layer, then the root; FSDP2's mixed precision casts
    (no autocast); the gradient reduce-scatter runs once per optimizer step, in the last micro-batch's backward
    (earlier ones accumulate unsharded gradients)."""

    name = "FSDP2"
    single_device = False

    def __init__(self, model: nn.Module, precision: Precision, offloads_to_cpu: bool = False) -> None:
        self.model, self.precision = model, precision
        self.offloads_to_cpu = offloads_to_cpu

    def autocast(self) -> AbstractContextManager:
        return contextlib.nullcontext()

    @contextmanager
    def backward_sync(self, last: bool) -> Iterator[None]:
        if last:
            yield
            return
        self.model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.model.set_requires_gradient_sync(True)

    def finish_gradients(self) -> None:
        pass

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        from hybridrl.distributed.fsdp import clip_grad_norm_

        return torch.tensor(clip_grad_norm_(self.model, max_norm))

    def max_over_ranks(self, value: int) -> int:
        return all_reduce_int(value, dist.ReduceOp.MAX)  # every rank must run as many FSDP forwards

    def model_state(self) -> dict[str, torch.Tensor]:
        """Collective: rank 0 gets the full state on CPU, the other ranks {}."""
        from hybridrl.distributed.fsdp import full_state_dict

        return full_state_dict(self.model, rank0_only=True)

    def load_model_state(self, state: dict[str, torch.Tensor]) -> None:
        """Collective: every rank passes the same full state."""
        from hybridrl.distributed.fsdp import load_full_state_dict

        load_full_state_dict(self.model, state)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        """Collective. FSDP's full optimizer state is keyed by parameter name; it is re-keyed by position in the
        optimizer's parameter list, which is what one process saves, so either side can load it."""
        if not optimizer.state:  # no step yet (critic warm-up): torch's full optimizer state dict would create the
            return optimizer.state_dict() if dist.get_rank() == 0 else {}  # state by a zero-gradient step (AdamW 1)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        full = get_optimizer_state_dict(self.model, optimizer,
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not full:
            return {}  # not rank 0
        index = {name: i for i, name in enumerate(_trainable_names(self.model))}
        groups = [{**group, "params": [index[name] for name in group["params"]]} for group in full["param_groups"]]
        return {"state": {index[name]: value for name, value in full["state"].items()}, "param_groups": groups}

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """Collective: every rank passes the state of either kind of run."""
        if not state["state"]:  # saved before any step: a fresh optimizer (torch's loader would step it once)
            optimizer.state.clear()
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = _trainable_names(self.model)
        groups = [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]]
        by_name = {"state": {names[i]: value for i, value in state["state"].items()}, "param_groups": groups}
        set_optimizer_state_dict(self.model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))

    def named_weights(self, dtype: torch.dtype | None = None) -> Iterable[tuple[str, torch.Tensor]]:
        """Gathered one FSDP unit at a time, cast to `dtype` before the gather (collective)."""
        from hybridrl.distributed.fsdp import iter_full_params

        return iter_full_params(self.model, dtype)

    def weight_units(self) -> Iterable[list[str]]:
        from hybridrl.distributed.fsdp import unsharded_units

        return unsharded_units(self.model)


def _trainable_names(model: nn.Module) -> list[str]:
    """Parameter names in the order `build_optimizer` hands them to the optimizer."""
    return [name for name, param in model.named_parameters() if param.requires_grad]


def uses_cpu_offload_policy(fsdp_cfg: Any) -> bool:
    """Whether `parallelize` will shard with FSDP2's CPUOffloadPolicy: `offload_policy` where a process group
    exists (the ranks of a worker group, one rank included); the model may then be loaded on the CPU."""
    return bool(fsdp_cfg.offload_policy) and dist.is_available() and dist.is_initialized()


def parallelize(model: nn.Module, fsdp_cfg: Any, precision: Precision, role: str, *,
                log_prob_forward: bool = False) -> ParallelStrategy:
    """Spread `model` over the ranks of this process's group (none: one device) as the role's `fsdp_config`
    says (`fsdp_size`, `reshard_after_forward`, `offload_policy`), with its resolved `precision`; rank 0 logs
    the layout.

    Call it after gradient-checkpointing and compile set-up and before building the optimizer (the optimizer
    must see the sharded parameters). `log_prob_forward`: the model serves `forward.response_log_probs`,
    which calls the body and the LM head directly, so under FSDP2 that path is registered as a forward method.
    """
    world = rank_and_world_size()[1]
    shard_ranks = world if fsdp_cfg.fsdp_size == -1 else min(fsdp_cfg.fsdp_size, world)  # verl: >= world = all
    strategy: ParallelStrategy
    offload = uses_cpu_offload_policy(fsdp_cfg)
    if world == 1 and not offload:
        return SingleDevice(model, precision)
    if shard_ranks == 1 and not offload:
        strategy = Replicas(model, precision)
        layout = f"a whole copy on each of its {world} ranks (fsdp_config.fsdp_size=1), gradients averaged"
    else:
        _apply_fsdp2(model, fsdp_cfg, precision, log_prob_forward, offload)
        strategy = FullyShardedStrategy(model, precision, offloads_to_cpu=offload)
        layout = _fsdp2_layout(shard_ranks, world, offload) + (
            f" (fsdp_config.fsdp_size={fsdp_cfg.fsdp_size} >= its ranks: all of them, as in verl)"
            if fsdp_cfg.fsdp_size > world else "")
    if is_rank0():
        log.info("%s: %s", role, layout)
    return strategy


def _fsdp2_layout(shard_ranks: int, world: int, offload: bool) -> str:
    spread = ("over its one rank" if world == 1 else
              f"parameters sharded over {shard_ranks} of its {world} ranks" if shard_ranks > 1 else
              f"whole parameters on each of its {world} ranks (fsdp_size=1: shard groups of one)")
    if not offload:
        return f"FSDP2, {spread}"
    return (f"FSDP2 with CPUOffloadPolicy (fsdp_config.offload_policy), {spread}: parameters, gradients and "
            "optimizer state on the CPU, each unit's parameters copied to the device for its forward and backward, "
            "the optimizer stepping on the CPU")


def _apply_fsdp2(model: nn.Module, fsdp_cfg: Any, precision: Precision, log_prob_forward: bool,
                 cpu_offload: bool) -> None:
    from hybridrl.distributed.fsdp import apply_fsdp2
    from hybridrl.workers.distill_forward import enable_fsdp_distill_forward
    from hybridrl.workers.forward import enable_fsdp_log_prob_forward

    # HF heads return views (e.g. logits); FSDP2 warns in case they are modified in place, which no
    # hybridrl forward path does, so the per-call warning is noise here.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    apply_fsdp2(model, param_dtype=precision.fsdp_param_dtype, reduce_dtype=precision.reduce,
                reshard_after_forward=fsdp_cfg.reshard_after_forward, fsdp_size=fsdp_cfg.fsdp_size,
                cpu_offload=cpu_offload)
    if log_prob_forward:
        enable_fsdp_log_prob_forward(model)
        enable_fsdp_distill_forward(model)  # on-policy distillation's top-k passes (student and teacher)
