"""The one build of a role's model: precision → load → checkpointing → compile → parallelize → optimizer →
offload → LR schedule, shared by the actor and the critic (`build_trainable`) and, without the optimizer, the
reference (`build_frozen`); and the checkpoint state of a trained role (`TrainState`).

Offload has three forms: FSDP2's CPUOffloadPolicy (`fsdp_config.offload_policy`: parameters, gradients and
optimizer state on the CPU throughout, the optimizer stepping there), moves between phases
(`param_offload` / `optimizer_offload`, `workers/offload.py`) and saved activations in host memory during
a training forward (`model.enable_activation_offload`, `workers/activation_offload.py`).

What differs between the roles is data (`RoleSpec`: which config section, which keys name a problem) plus
how the model is loaded (a causal LM, with LoRA for the actor; a value model for the critic).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.sequence_parallel import SP_KEYS, sequence_parallel_size
from hybridrl.logging.log import get_logger
from hybridrl.models.compile import compile_decoder_layers
from hybridrl.models.hf import enable_activation_checkpointing
from hybridrl.utils.collectives import is_rank0
from hybridrl.workers.activation_offload import ActivationOffload, activation_offload
from hybridrl.workers.offload import PhaseOffloader
from hybridrl.workers.optim import build_lr_scheduler, build_optimizer
from hybridrl.workers.parallel import ParallelStrategy, parallelize, uses_cpu_offload_policy
from hybridrl.workers.precision import Precision, log_precision, resolve_precision
from hybridrl.workers.sequence_split import apply_sequence_parallel, ulysses_of

log = get_logger("workers.trainable")
CPU = torch.device("cpu")
# (master dtype, device to load on) -> the role's model on that device: the role's device, or the CPU when
# FSDP2's CPUOffloadPolicy will hold it (fully_shard then moves one unit at a time through the device)
LoadModel = Callable[[torch.dtype, torch.device], torch.nn.Module]


@dataclass(frozen=True)
class RoleSpec:
    """What the build reads of a role's config section, and the keys its messages name."""

    role: str  # "actor", "critic" or "reference" (log lines)
    fsdp_key: str  # where its fsdp_config lives, e.g. "actor_rollout_ref.actor.fsdp_config"
    fsdp: Any  # that fsdp_config: precision, fsdp_size, reshard_after_forward, offloads
    optim: Any = None  # its optim section; None: frozen (the reference)
    gradient_checkpointing: bool = False
    compile: bool = False  # use_torch_compile (both the role's key and its fsdp_config's where verl has two)
    compile_key: str = ""  # the key that turns compilation off
    log_prob_forward: bool = False  # it computes log-probs (`forward.response_log_probs`), not values
    lora: bool = False  # a PEFT adapter trains: frozen embeddings must still let checkpointed blocks see grads
    activation_offload: bool = False  # enable_activation_offload: saved activations in host memory in training
    sequence_parallel: int = 1  # ulysses_sequence_parallel_size: ranks that split each sequence
    sequence_parallel_key: str = ""  # the key that sets it (messages)

    @classmethod
    def actor(cls, cfg: HybridRLConfig) -> RoleSpec:
        arr = cfg.actor_rollout_ref
        fsdp = arr.actor.fsdp_config
        return cls("actor", "actor_rollout_ref.actor.fsdp_config", fsdp, arr.actor.optim,
                   arr.model.enable_gradient_checkpointing,
                   arr.actor.use_torch_compile and fsdp.use_torch_compile and not arr.model.batch_invariant,
                   "actor_rollout_ref.actor.use_torch_compile", log_prob_forward=True, lora=arr.model.lora_rank > 0,
                   activation_offload=arr.model.enable_activation_offload,
                   **_sequence_parallel(cfg, "actor"))

    @classmethod
    def critic(cls, cfg: HybridRLConfig) -> RoleSpec:
        model = cfg.critic.model
        return cls("critic", "critic.model.fsdp_config", model.fsdp_config, cfg.critic.optim,
                   model.enable_gradient_checkpointing, model.fsdp_config.use_torch_compile,
                   "critic.model.fsdp_config.use_torch_compile", activation_offload=model.enable_activation_offload,
                   **_sequence_parallel(cfg, "critic"))

    @classmethod
    def reference(cls, cfg: HybridRLConfig) -> RoleSpec:
        ref = cfg.actor_rollout_ref.ref
        return cls("reference", "actor_rollout_ref.ref.fsdp_config", ref.fsdp_config,
                   compile=ref.use_torch_compile and ref.fsdp_config.use_torch_compile
                   and not cfg.actor_rollout_ref.model.batch_invariant,
                   compile_key="actor_rollout_ref.ref.use_torch_compile", log_prob_forward=True,
                   **_sequence_parallel(cfg, "ref"))


def _sequence_parallel(cfg: HybridRLConfig, role: str) -> dict[str, Any]:
    return {"sequence_parallel": sequence_parallel_size(cfg, role), "sequence_parallel_key": SP_KEYS[role]}


@dataclass
class Trainable:
    model: torch.nn.Module
    precision: Precision
    parallel: ParallelStrategy
    optimizer: torch.optim.Optimizer
    lr_scheduler: torch.optim.lr_scheduler.LRScheduler
    offloader: PhaseOffloader  # param_offload / optimizer_offload between the role's phases
    activation_offload: ActivationOffload | None  # enable_activation_offload: entered around each micro-batch


@dataclass
class Frozen:
    model: torch.nn.Module
    precision: Precision
    parallel: ParallelStrategy
    offloader: PhaseOffloader  # param_offload between the role's forwards


def build_trainable(spec: RoleSpec, device: torch.device, load: LoadModel, total_steps: int) -> Trainable:
    """The role's model ready to train: parallelized over this process's group (`parallelize`), then its
    optimizer (which must see the parallelized parameters), offloads and LR schedule."""
    model, precision, parallel = _prepare(spec, device, load)
    optimizer = build_optimizer(model.parameters(), spec.optim, steps_on_host=parallel.offloads_to_cpu)
    offloader = PhaseOffloader(model, optimizer, device, *phase_offloads(spec, parallel))
    return Trainable(model, precision, parallel, optimizer, build_lr_scheduler(optimizer, spec.optim, total_steps),
                     offloader, activation_offload(spec.activation_offload, device))


def build_frozen(spec: RoleSpec, device: torch.device, load: LoadModel) -> Frozen:
    """A model that only runs forwards (no gradients, no optimizer): the reference policy."""
    model, precision, parallel = _prepare(spec, device, load)
    return Frozen(model, precision, parallel, PhaseOffloader(model, None, device, *phase_offloads(spec, parallel)))


def phase_offloads(spec: RoleSpec, parallel: ParallelStrategy) -> tuple[bool, bool]:
    """(param_offload, optimizer_offload) between phases. Under FSDP2's CPUOffloadPolicy there is nothing left
    to move (verl too drops both then); `offload_policy` without a process group (one device, in the trainer's
    process) moves parameters and optimizer state out between phases instead, with one line saying so."""
    fsdp, key, trains = spec.fsdp, spec.fsdp_key, spec.optim is not None
    if parallel.offloads_to_cpu:
        if (fsdp.param_offload or fsdp.optimizer_offload) and is_rank0():
            log.info("%s: %s.offload_policy=true keeps parameters, gradients and optimizer state on the CPU "
                     "throughout, so param_offload / optimizer_offload have nothing to move (as in verl)",
                     spec.role, key)
        return False, False
    if fsdp.offload_policy:
        instead = ("parameters and optimizer state stay on the CPU between phases (as param_offload=true, "
                   "optimizer_offload=true) and come to the device for the update, where the optimizer steps"
                   if trains else "parameters stay on the CPU between forwards (as param_offload=true)")
        log.warning("%s: %s.offload_policy=true: FSDP2's CPUOffloadPolicy needs a process group, and a one-device "
                    "run in the trainer's own process has none; %s", spec.role, key, instead)
        return True, trains
    return fsdp.param_offload, fsdp.optimizer_offload and trains


def _prepare(spec: RoleSpec, device: torch.device, load: LoadModel
             ) -> tuple[torch.nn.Module, Precision, ParallelStrategy]:
    trains = spec.optim is not None
    precision = resolve_precision(spec.fsdp, device, spec.fsdp_key)
    log_precision(spec.role, precision, trains=trains)
    model = load(precision.master, CPU if uses_cpu_offload_policy(spec.fsdp) else device)
    if not trains:
        model.requires_grad_(False).eval()
    if spec.gradient_checkpointing:
        enable_activation_checkpointing(model)
        if spec.lora:
            model.enable_input_require_grads()  # frozen embeddings: let checkpointed blocks see grads
    compile_decoder_layers(model, device, spec.role, enabled=spec.compile, off_key=spec.compile_key)
    parallel = parallelize(model, spec.fsdp, precision, spec.role, log_prob_forward=spec.log_prob_forward)
    if apply_sequence_parallel(model, spec.sequence_parallel, spec.sequence_parallel_key) and is_rank0():
        log.info("%s: Ulysses sequence parallelism over groups of %d ranks (%s)", spec.role,
                 spec.sequence_parallel, spec.sequence_parallel_key)
    return model, precision, parallel


class TrainState:
    """A trained role's model, optimizer, LR schedule and how they are parallelized; its checkpoint state is
    unsharded whatever the world size, so a checkpoint resumes on any number of ranks."""

    lora: bool = False  # a PEFT adapter trains (the actor's LoRA): checkpoints also hold it in peft format

    def __init__(self, trainable: Trainable) -> None:
        self.model, self.precision, self.parallel = trainable.model, trainable.precision, trainable.parallel
        self.optimizer, self.lr_scheduler = trainable.optimizer, trainable.lr_scheduler
        self.offloader = trainable.offloader
        self.activation_offload = trainable.activation_offload
        sp = ulysses_of(self.model)
        self.sequence_parallel = sp.size if sp is not None else 1  # ranks holding the same rows

    def saved_activations(self) -> AbstractContextManager:
        """Around a micro-batch's forward and backward: what the forward saves waits in host memory when the
        role's enable_activation_offload is on."""
        return self.activation_offload if self.activation_offload is not None else contextlib.nullcontext()

    def state_dict(self) -> dict:
        """Unsharded state (collective under FSDP2: rank 0 gets it, the other ranks get empty dicts)."""
        with self.offloader.resident():
            return {"model": self.parallel.model_state(), "optimizer": self.parallel.optimizer_state(self.optimizer),
                    "lr_scheduler": self.lr_scheduler.state_dict()}

    def load_checkpoint_state(self, state: dict) -> None:
        """What `checkpoint.manager.load_role` read: `model`, `optimizer` and `extra` (the LR schedule), those
        that `checkpoint.load_contents` named. Collective under FSDP2: every rank passes the full state."""
        with self.offloader.resident():
            if "model" in state:
                self.parallel.load_model_state(state["model"])
            if "optimizer" in state:
                self.parallel.load_optimizer_state(self.optimizer, state["optimizer"])
        if "extra" in state:
            self.lr_scheduler.load_state_dict(state["extra"]["lr_scheduler"])

    def step(self, grad_clip: float, grad_scale: torch.Tensor | float = 1.0) -> torch.Tensor:
        """After an optimizer step's last backward: complete the gradients, scale them by `grad_scale` (a loss
        normaliser known only after the backwards: loss_scope.MicroBatchWeights.rescale), clip them, step unless
        the norm is not finite (the step is then skipped); returns the norm before clipping."""
        self.parallel.finish_gradients()
        scale = float(grad_scale)  # a Python number: FSDP2's DTensor gradients take no plain-tensor operand
        if scale != 1.0:
            for param in self.model.parameters():
                if param.grad is not None:
                    param.grad.mul_(scale)
        grad_norm = self.parallel.clip_grad_norm(grad_clip)
        if torch.isfinite(grad_norm):
            self.offloader.before_step()  # optimizer_offload: its state comes in now, after backward
            self.optimizer.step()
        return grad_norm
