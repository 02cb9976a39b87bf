"""Activation offload (verl's `model.enable_activation_offload`): the tensors a training forward saves for its
backward wait in host memory instead of on the device.

Built on PyTorch's saved-tensor hooks (`torch.autograd.graph.saved_tensors_hooks`, the mechanism of
`torch.autograd.graph.save_on_cpu`), entered around each micro-batch's forward and backward. With gradient
checkpointing (non-reentrant, as HF enables it) a checkpointed decoder layer saves only its input, the
(B, T, H) residual stream, so those inputs, one per layer, plus what the non-checkpointed head saves, are
what travels: L x B x T x H elements per micro-batch instead of the layers' whole activation sets. Without
checkpointing every activation of every layer travels (much more PCIe traffic).

Two differences from `save_on_cpu`, both because the weights are not activations:
- parameters (and views of them, e.g. the `weight.t()` a linear saves) stay where they are. `save_on_cpu`
  copies them too: the LM head's weight (V x H, ~1 GB in bf16 for a 152k vocabulary at H=3584) would cross
  PCIe twice per micro-batch, once per log-prob chunk on the chunked torch path, and exist twice on the device
  during backward. (Under `torch.autocast` on one device the bf16 copy autocast makes of a weight is a new
  tensor, not a parameter, and travels like an activation.)
- device -> host copies are asynchronous into pinned memory (`save_on_cpu` blocks the host on each): they are
  queued on the stream that produced the tensor, so a freed source block is reused only by later kernels of
  that stream, and the pinned allocator records the copy before reusing its block. Host -> device copies
  in backward are asynchronous too, as in `save_on_cpu`.
Tensors already in host memory (a CPU run) stay as they are: nothing to move, the hooks still run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import torch
from torch import nn

Packed: TypeAlias = "torch.Tensor | tuple[torch.device, torch.Tensor]"  # kept in place, or (device, host copy)


@dataclass
class OffloadCounts:
    """What the hooks have seen (cumulative): activations sent to host memory (or already there), parameters kept."""

    activations: int = 0
    activation_bytes: int = 0
    parameters: int = 0


def is_parameter(tensor: torch.Tensor) -> bool:
    """A parameter or a view of one (FSDP2's unsharded parameters are `nn.Parameter`s too)."""
    return isinstance(tensor, nn.Parameter) or isinstance(tensor._base, nn.Parameter)


class ActivationOffload(torch.autograd.graph.saved_tensors_hooks):
    """`with offload:` around a micro-batch's forward and backward; re-enterable, not nestable in itself.

    `pin_memory`: host copies in pinned memory, copied asynchronously (CUDA); False on a CPU run.
    """

    def __init__(self, pin_memory: bool) -> None:
        self.pin_memory = pin_memory
        self.counts = OffloadCounts()
        super().__init__(self._pack, self._unpack)

    def _pack(self, tensor: torch.Tensor) -> Packed:
        if is_parameter(tensor) or tensor.layout != torch.strided:
            self.counts.parameters += is_parameter(tensor)
            return tensor
        self.counts.activations += 1
        self.counts.activation_bytes += tensor.numel() * tensor.element_size()
        if tensor.device.type == "cpu":
            return tensor
        return tensor.device, copy_with_strides(tensor, torch.device("cpu"), self.pin_memory)

    def _unpack(self, packed: Packed) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        device, host = packed
        return copy_with_strides(host, device, self.pin_memory)


def copy_with_strides(tensor: torch.Tensor, device: torch.device, asynchronous: bool) -> torch.Tensor:
    """A copy on `device` with the source's sizes and strides. Compiled (inductor) backward graphs assert the
    strides of what they saved, e.g. a permuted (B, heads, T) view; a contiguous copy would fail that check.
    Pinned host memory when `asynchronous` and the copy goes to the CPU."""
    pin = asynchronous and device.type == "cpu"
    # An overlapping (expanded) or gapped view cannot be rebuilt densely with its strides: a contiguous copy.
    strides = tensor.stride() if is_dense_permutation(tensor) else torch.empty(tensor.size(), device="meta").stride()
    copy = torch.empty_strided(tensor.size(), strides, dtype=tensor.dtype, device=device, pin_memory=pin)
    return copy.copy_(tensor, non_blocking=asynchronous)


def is_dense_permutation(tensor: torch.Tensor) -> bool:
    """Whether the elements fill a block of memory exactly, in some order of the dimensions (a contiguous tensor,
    or a permutation / transpose of one)."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(tensor.size(), tensor.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def activation_offload(enabled: bool, device: torch.device) -> ActivationOffload | None:
    """The role's hooks, or None when `enabled` is false (callers then enter a null context)."""
    return ActivationOffload(pin_memory=device.type == "cuda") if enabled else None
