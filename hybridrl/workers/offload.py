"""Manual CPU offload between phases (verl's `fsdp_config.param_offload` / `optimizer_offload`).

In a hybrid step the actor's training state is idle while the rollout engine generates and while the
reference model runs; on one GPU that idle state (16 bytes/param for fp32 weights, grads and Adam
moments) competes with the KV cache. Moving it to host memory between the phases that use it frees
that room for ~2-3 s of PCIe traffic per step on a 7B model (perf.md §5.2).

Every `nn.Parameter` object stays the same, so optimizers, LR schedulers, tied embeddings and hooks keep
pointing at valid parameters. One process: tensors move in place of their `.data` (and `.grad`). A rank of
an FSDP2 group: parameters are DTensors whose local shard FSDP gathers from its own
reference, so the module (an FSDP root, `FSDPModule`) moves through its `_apply` (what `module.to` uses),
which swaps each parameter's contents in place and re-registers the moved shard with FSDP; only this rank's
shard travels. Optimizer
state moves the same way in both cases (a DTensor's local shard). Device→host copies land in pinned
memory (faster and async); one synchronize at the end makes them safe to read.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Callable, Iterator

import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

CPU = torch.device("cpu")


def _to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` on `device`; a CUDA→CPU copy goes to pinned memory so it can run asynchronously."""
    if tensor.device == device:
        return tensor
    if device.type == "cpu" and tensor.is_cuda:
        host = torch.empty(tensor.shape, dtype=tensor.dtype, device=CPU, pin_memory=True)
        return host.copy_(tensor, non_blocking=True)
    return tensor.to(device, non_blocking=True)


def _move(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`_to` for plain tensors and DTensors (a sharded parameter, gradient or optimizer state): a DTensor
    keeps its spec (mesh, placements, global shape); its local shard moves. Built with the DTensor
    constructor: `DTensor.from_local` would put a host shard straight back on the mesh's device."""
    if not isinstance(tensor, DTensor):
        return _to(tensor, device)
    local = tensor._local_tensor
    moved = _to(local, device)
    if moved is local:
        return tensor
    return DTensor(moved, tensor._spec, requires_grad=tensor.requires_grad)


def _finish(device: torch.device, source: torch.device | None) -> None:
    """After a device→host move: wait for the async copies (host tensors must not be read early) and
    hand the freed blocks back to the driver. Host→device copies need no wait: later kernels queue
    behind them on the same stream, and the pinned allocator keeps the source alive until they ran."""
    if device.type == "cpu" and source is not None and source.type == "cuda":
        torch.cuda.synchronize(source)
        torch.cuda.empty_cache()


def _module_device(module: torch.nn.Module) -> torch.device | None:
    first = next(module.parameters(), None)
    return first.device if first is not None else None


def move_module(module: torch.nn.Module, device: torch.device | str) -> None:
    """Move parameters, their gradients and buffers to `device`, keeping every Parameter object (an FSDP2 root:
    this rank's shards, see the module docstring)."""
    device = torch.device(device)
    source = _module_device(module)
    if isinstance(module, FSDPModule):
        with torch.no_grad():
            module._apply(lambda tensor: _move(tensor, device))
        _finish(device, source)
        return
    with torch.no_grad():
        for param in module.parameters():  # deduplicated: a tied weight moves once
            param.data = _to(param.data, device)
            if param.grad is not None:
                param.grad = _to(param.grad, device)
        for sub in module.modules():
            for name, buffer in sub._buffers.items():
                if buffer is not None:
                    sub._buffers[name] = _to(buffer, device)
    _finish(device, source)


def offload_module(module: torch.nn.Module) -> None:
    """Parameters, gradients and buffers to host memory (the device copy is freed)."""
    move_module(module, CPU)


def load_module(module: torch.nn.Module, device: torch.device | str) -> None:
    """Parameters, gradients and buffers back to `device`."""
    move_module(module, device)


def _state_tensors(optim: torch.optim.Optimizer) -> Iterator[tuple[dict, str, torch.Tensor]]:
    """(state dict, key, tensor) of every per-parameter state tensor except scalar step counters.

    AdamW keeps `step` as a 0-dim CPU tensor unless capturable/fused; it must stay where it is.
    """
    for state in optim.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                yield state, key, value


def move_optimizer(optim: torch.optim.Optimizer, device: torch.device | str) -> None:
    """Move optimizer state (e.g. AdamW exp_avg, exp_avg_sq) to `device`; parameters are not touched."""
    device = torch.device(device)
    sources = set()
    for state, key, value in list(_state_tensors(optim)):
        sources.add(value.device)
        state[key] = _move(value, device)
    _finish(device, next((d for d in sources if d.type == "cuda"), None))


def offload_optimizer(optim: torch.optim.Optimizer) -> None:
    move_optimizer(optim, CPU)


def load_optimizer(optim: torch.optim.Optimizer, device: torch.device | str) -> None:
    move_optimizer(optim, device)


class _Residency:
    """On the device while any (nested) user holds it, moved out when the last one lets go."""

    def __init__(self, enabled: bool, load: Callable[[], None], offload: Callable[[], None]) -> None:
        self.enabled, self.load, self.offload = enabled, load, offload
        self.users = 0
        if enabled:  # idle from the start
            offload()

    @contextmanager
    def held(self) -> Iterator[None]:
        if self.enabled and self.users == 0:
            self.load()
        self.users += 1
        try:
            yield
        finally:
            self.users -= 1
            if self.enabled and self.users == 0:
                self.offload()


class PhaseOffloader:
    """Keeps a role's parameters and/or optimizer state on the CPU while idle, on `device` in its phases.

    - `for_compute()`: forward-only phases (log-probs, weight sync): parameters in, optimizer stays out.
    - `for_update()`: training: parameters and gradients in; optimizer state from `before_step()` (call it
      right before `optimizer.step()`) until the update ends; all back out afterwards.
    Nesting is allowed (a phase inside another moves nothing). With both flags off it does nothing, so
    callers can wrap phases unconditionally. The constructor offloads right away (the idle state).
    """

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                 device: torch.device | str, param_offload: bool, optimizer_offload: bool) -> None:
        self.module, self.optimizer = module, optimizer
        self.device = torch.device(device)
        self.param_offload = param_offload
        self.optimizer_offload = optimizer_offload and optimizer is not None
        self._params = _Residency(self.param_offload, lambda: load_module(module, self.device),
                                  lambda: offload_module(module))
        # state created lazily by the first optimizer step goes out too
        self._optimizer = _Residency(self.optimizer_offload, lambda: load_optimizer(optimizer, self.device),
                                     lambda: offload_optimizer(optimizer))
        self._update_stack: ExitStack | None = None

    @contextmanager
    def for_compute(self) -> Iterator[None]:
        with self._params.held():
            yield

    @contextmanager
    def for_update(self) -> Iterator[None]:
        """Parameters (and gradients) in for the whole update; optimizer state only from `before_step()` on,
        so forward and backward run without it (the update's activation peak and the optimizer state
        never share the device when the update takes one optimizer step)."""
        with self._params.held(), ExitStack() as stack:
            self._update_stack = stack
            try:
                yield
            finally:
                self._update_stack = None

    @contextmanager
    def resident(self) -> Iterator[None]:
        """Parameters and optimizer state both in (checkpoint save and load: an FSDP2 state dict gathers
        and scatters shards with collectives on the device)."""
        with self._params.held(), self._optimizer.held():
            yield

    def before_step(self) -> None:
        """Bring the optimizer state in (first call in an update; it leaves when the update ends)."""
        if self._update_stack is None:
            raise RuntimeError("PhaseOffloader.before_step() belongs inside `with offloader.for_update():`")
        if self._optimizer.users == 0:
            self._update_stack.enter_context(self._optimizer.held())
