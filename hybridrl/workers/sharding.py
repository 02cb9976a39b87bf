"""What changes in a role worker when it runs as one rank of a data-parallel group (FSDP2).

Every helper takes `sharded`: False keeps the single-process code path exactly as it was (plain
`state_dict`, `torch.nn.utils.clip_grad_norm_`), True uses the collective FSDP2 forms from
`hybridrl.distributed.fsdp`. State dicts are always the unsharded, single-process format (model:
`{name: tensor}`; optimizer: `torch.optim` layout with integer parameter indices), so a checkpoint
saved by N ranks loads on M ranks or in one process. The collective helpers must be called on every
rank of the group in the same order.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn

from hybridrl.logging.log import get_logger
from hybridrl.utils.collectives import all_reduce_int, is_rank0
from hybridrl.workers.offload import PhaseOffloader

log = get_logger("workers.sharding")


def is_distributed() -> bool:
    """True inside a worker-group rank (torch.distributed initialised by the launcher)."""
    return dist.is_available() and dist.is_initialized()


def shard_model(model: nn.Module, *, log_prob_forward: bool = False, param_dtype: torch.dtype | None = None,
                reduce_dtype: torch.dtype = torch.float32, reshard_after_forward: bool = True,
                fsdp_size: int = -1) -> bool:
    """Shard `model` with FSDP2 in place when running as a rank; returns whether it did.

    Call it after gradient-checkpointing set-up and before building the optimizer (the optimizer must
    see the sharded parameters). `log_prob_forward`: the model serves `response_log_probs`, which
    calls the body and the LM head directly, so that path is registered as an FSDP forward method.
    `param_dtype` / `reduce_dtype`: FSDP2's mixed precision (`Precision.fsdp_param_dtype`, `.reduce`);
    param_dtype None computes in the weights' own dtype, as one process does. `reshard_after_forward`
    (the role's `fsdp_config` key): False keeps each layer's gathered weights from forward to backward
    (no second all-gather, one unsharded layer more in memory per FSDP unit). `fsdp_size` (the role's
    `fsdp_config` key): shard over groups of that many ranks, replicated across groups (HSDP; -1 = all ranks).
    A shard group of one rank (fsdp_size=1, or a one-rank group) keeps the plain module: whole replicas,
    which `replica_gradients` keeps equal.
    """
    if not is_distributed() or shard_group_size(fsdp_size) == 1:
        return False
    from hybridrl.distributed.fsdp import apply_fsdp2
    from hybridrl.workers.forward import enable_fsdp_log_prob_forward

    # HF heads return views (e.g. logits); FSDP2 warns in case they are modified in place, which no
    # hybridrl forward path does, so the per-call warning is noise here.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    apply_fsdp2(model, param_dtype=param_dtype, reduce_dtype=reduce_dtype, reshard_after_forward=reshard_after_forward,
                fsdp_size=fsdp_size)
    if log_prob_forward:
        enable_fsdp_log_prob_forward(model)
    return True


def shard_role(model: nn.Module, fsdp_cfg, precision, role: str, *, log_prob_forward: bool = False) -> bool:
    """`shard_model` (FSDP2 when running as a rank) with a role's `fsdp_config` (reshard_after_forward,
    fsdp_size) and resolved precision; rank 0 logs how the `role` is laid out over its ranks."""
    sharded = shard_model(model, log_prob_forward=log_prob_forward, param_dtype=precision.fsdp_param_dtype,
                          reduce_dtype=precision.reduce, reshard_after_forward=fsdp_cfg.reshard_after_forward,
                          fsdp_size=fsdp_cfg.fsdp_size)
    if is_distributed() and is_rank0() and dist.get_world_size() > 1:
        world, group = dist.get_world_size(), shard_group_size(fsdp_cfg.fsdp_size)
        log.info("%s: %s", role, f"FSDP2, parameters sharded over {group} of its {world} ranks" if sharded else
                 f"a whole copy on each of its {world} ranks (fsdp_config.fsdp_size=1), gradients averaged")
    return sharded


def shard_group_size(fsdp_size: int) -> int:
    """Ranks one parameter is sharded over: the whole group for fsdp_size -1, else fsdp_size (as a rank)."""
    return dist.get_world_size() if fsdp_size == -1 else fsdp_size


def trains_replicas(fsdp_cfg) -> bool:
    """True on a rank holding a whole copy of a role that trains beside other copies (fsdp_size=1 on more
    than one rank): its gradients are averaged over the ranks before each optimizer step."""
    return is_distributed() and dist.get_world_size() > 1 and shard_group_size(fsdp_cfg.fsdp_size) == 1


class _OneCopy:
    """`replica_gradients` when there are no other copies to agree with: nothing to do."""

    averages = False

    @contextmanager
    def overlapping(self, active: bool = True) -> Iterator[None]:
        yield

    def finish(self) -> None:
        pass


def replica_gradients(model: nn.Module, fsdp_cfg, reduce_dtype: torch.dtype):
    """Whole replicas (`trains_replicas`): a `GradientAverager` over the model's trainable parameters, which
    makes every gradient its mean over the ranks as FSDP's reduce would (wrap the last backward of an optimizer
    step in `.overlapping()`, then call `.finish()`, collective); otherwise an object that does nothing.
    `.averages` tells which."""
    if not trains_replicas(fsdp_cfg):
        return _OneCopy()
    from hybridrl.distributed.replicas import GradientAverager

    return GradientAverager(model.parameters(), reduce_dtype)


def max_over_ranks(value: int, sharded: bool) -> int:
    """The largest `value` of all ranks (collective when sharded): ranks must run as many FSDP forwards."""
    return all_reduce_int(value, dist.ReduceOp.MAX) if sharded else value


@contextmanager
def gradient_sync(model: nn.Module, sharded: bool, enabled: bool) -> Iterator[None]:
    """FSDP2: skip (enabled=False) the gradient reduce-scatter of the backward passes inside; gradients
    accumulate unsharded until a backward with sync on reduces the sum once. No-op in one process."""
    if not sharded or enabled:
        yield
        return
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def clip_grad_norm(model: nn.Module, max_norm: float, sharded: bool) -> torch.Tensor:
    """The total gradient norm before clipping (over every shard when sharded), as a tensor."""
    if not sharded:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    from hybridrl.distributed.fsdp import clip_grad_norm_

    return torch.tensor(clip_grad_norm_(model, max_norm))


def model_state(model: nn.Module, sharded: bool) -> dict[str, torch.Tensor]:
    """The full state dict (collective when sharded; then rank 0 gets it on CPU, other ranks get {})."""
    if not sharded:
        return model.state_dict()
    from hybridrl.distributed.fsdp import full_state_dict

    return full_state_dict(model, rank0_only=True)


def load_model_state(model: nn.Module, state: dict[str, torch.Tensor], sharded: bool) -> None:
    """Load a full state dict; when sharded every rank passes the same full state (collective)."""
    if not sharded:
        model.load_state_dict(state)
        return
    from hybridrl.distributed.fsdp import load_full_state_dict

    load_full_state_dict(model, state)


def named_weights(model: nn.Module, sharded: bool,
                  gather_dtype: torch.dtype | None = None) -> Iterable[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) pairs for weight sync, tied parameters once (as `named_parameters` reports
    them): the parameters as stored, or gathered one FSDP unit at a time in `gather_dtype` when given (the
    receiver's dtype: fewer bytes over the link; consumers cast whatever they get)."""
    if not sharded:
        return ((name, param.detach()) for name, param in model.named_parameters())
    from hybridrl.distributed.fsdp import iter_full_params

    return iter_full_params(model, gather_dtype)


def _trainable_names(model: nn.Module) -> list[str]:
    """Parameter names in the order `build_optimizer` hands them to the optimizer."""
    return [name for name, param in model.named_parameters() if param.requires_grad]


def optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> dict:
    """The optimizer state in `optimizer.state_dict()` layout, unsharded (collective when sharded).

    FSDP's full optimizer state is keyed by parameter name; it is re-keyed by position in the
    optimizer's parameter list, which is what one process saves, so either side can load it.
    """
    if not sharded:
        return optimizer.state_dict()
    if not optimizer.state:  # no step yet (critic warm-up): torch's full optimizer state dict would create the
        return optimizer.state_dict() if dist.get_rank() == 0 else {}  # state by a zero-gradient step (AdamW step 1)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not full:
        return {}  # not rank 0
    index = {name: i for i, name in enumerate(_trainable_names(model))}
    groups = [{**group, "params": [index[name] for name in group["params"]]} for group in full["param_groups"]]
    return {"state": {index[name]: value for name, value in full["state"].items()}, "param_groups": groups}


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, sharded: bool) -> None:
    """Load an `optimizer.state_dict()`-layout state (from either kind of run); every rank passes it."""
    if not sharded:
        optimizer.load_state_dict(state)
        return
    if not state["state"]:  # saved before any step: a fresh optimizer (torch's loader would step it once)
        optimizer.state.clear()
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = _trainable_names(model)
    groups = [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]]
    by_name = {"state": {names[i]: value for i, value in state["state"].items()}, "param_groups": groups}
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))


class TrainState:
    """Checkpoint state of a trainable role (actor, critic): its `model`, `optimizer`, `lr_scheduler`,
    unsharded whatever the world size, so a checkpoint resumes on any number of ranks."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    lr_scheduler: torch.optim.lr_scheduler.LRScheduler
    sharded: bool
    offloader: PhaseOffloader  # param_offload / optimizer_offload: everything comes in for save and load
    lora: bool = False  # a PEFT adapter trains (the actor's LoRA): checkpoints also hold it in peft format

    def state_dict(self) -> dict:
        """Unsharded state (collective when sharded: rank 0 gets it, the other ranks get empty dicts)."""
        with self.offloader.resident():
            return {"model": model_state(self.model, self.sharded),
                    "optimizer": optimizer_state(self.model, self.optimizer, self.sharded),
                    "lr_scheduler": self.lr_scheduler.state_dict()}

    def load_checkpoint_state(self, state: dict) -> None:
        """What `checkpoint.manager.load_role` read: `model`, `optimizer` and `extra` (the LR schedule), those
        that `checkpoint.load_contents` named. Collective when sharded: every rank passes the full state."""
        with self.offloader.resident():
            if "model" in state:
                load_model_state(self.model, state["model"], self.sharded)
            if "optimizer" in state:
                load_optimizer_state(self.model, self.optimizer, state["optimizer"], self.sharded)
        if "extra" in state:
            self.lr_scheduler.load_state_dict(state["extra"]["lr_scheduler"])
