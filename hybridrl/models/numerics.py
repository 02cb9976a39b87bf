"""The trainer's half of the numerics it shares with the rollout engine: an fp32 residual stream.

A bf16 HF decoder rounds its residual stream to bf16 after every sub-layer. That stream is several times
larger than any one sub-layer's output, so its rounding is the largest error of the forward, and two
implementations whose kernels sum in different orders (the engine's decode step, the trainer's forward)
round it differently: on CPU (bf16, Qwen2.5-0.5B shape, random weights, 4 x 2 GSM8K prompts x 128
tokens) the mean |rollout - trainer log-prob| falls from 0.0085 to 0.0044 when both sides keep it in
fp32 (docs/design.md, "Numerics shared by the engine and the trainer", has the ranking of the causes).

For a decoder that computes in a 16-bit dtype (16-bit weights, FSDP2's `param_dtype`, or autocast), of an
architecture the engine runs (`ENGINE_MODEL_TYPES`), `keep_residual_stream_fp32` makes the forward:
- keep the residual stream in fp32: the embedding output is rounded to the compute dtype, then widened,
  so every `residual + sub-layer output` of the decoder layers is an fp32 sum;
- normalise and scale in fp32 in each RMSNorm (HF's `weight * h.to(input dtype)` with an fp32 input) and
  round its output once, to the compute dtype: the linear layers get 16-bit inputs, as before, with no
  autocast needed;
- rotate q/k with cos/sin in the compute dtype, as a plain 16-bit forward does (HF would take their dtype
  from the now-fp32 residual stream).
GEMMs, attention, SwiGLU and the LM head are unchanged, and an fp32 forward is not touched. The engine
computes the same (rollout/engine/models/llama.py, `residual_dtype`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hybridrl.logging.log import get_logger

log = get_logger("hybridrl.models")

# HF `model_type`s the rollout engine implements (rollout/engine/models/__init__.py, MODEL_REGISTRY)
ENGINE_MODEL_TYPES = frozenset({"llama", "mistral", "phi3", "qwen2", "qwen3"})
_HOOKS_ATTRIBUTE = "_hybridrl_residual_stream_hooks"


@dataclass
class ResidualStreamHooks:
    """The forward hooks `keep_residual_stream_fp32` registered; `remove()` restores the plain forward."""

    handles: list[RemovableHandle] = field(default_factory=list)

    model: nn.Module | None = None  # the model the hooks are on, marked while they are

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        if self.model is not None and getattr(self.model, _HOOKS_ATTRIBUTE, None) is self:
            delattr(self.model, _HOOKS_ATTRIBUTE)


@dataclass
class _ComputeDtype:
    """The compute dtype of the forward in progress: set by the embedding hook, read by the RoPE hook (both
    run once per forward, in that order; a scratch value, so a deep copy of the model may share it)."""

    dtype: torch.dtype | None = None


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """Autocast's dtype when it is on for `tensor`'s device, else `tensor`'s own (a weight: under FSDP2 its
    unsharded copy in `param_dtype`)."""
    device_type = tensor.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return tensor.dtype


def _is_16_bit(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 2


def keep_residual_stream_fp32(model: nn.Module) -> ResidualStreamHooks | None:
    """Give `model` (an HF causal LM or its PEFT wrapper) the shared numerics described in this module.

    Takes effect in forwards that compute in a 16-bit dtype; returns the hooks, or None (nothing changed)
    when the engine does not implement the architecture.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    model_type = getattr(getattr(base, "config", None), "model_type", None)
    if model_type not in ENGINE_MODEL_TYPES:
        return None
    body = getattr(base, base.base_model_prefix, None)
    rotary = getattr(body, "rotary_emb", None)
    norms = [module for module in body.modules() if type(module).__name__.endswith("RMSNorm")] if body else []
    if rotary is None or not norms:
        log.warning("%s: no rotary_emb or RMSNorm modules found in its decoder, so its forward keeps a 16-bit "
                    "residual stream (the rollout engine's is fp32: expect a larger rollout/trainer log-prob "
                    "gap); please report this transformers version", type(base).__name__)
        return None
    if keeps_fp32_residual_stream(base):
        return getattr(base, _HOOKS_ATTRIBUTE)
    compute = _ComputeDtype()
    hooks = ResidualStreamHooks(model=base)
    hooks.handles.append(base.get_input_embeddings().register_forward_hook(_widen_embedding(compute)))
    hooks.handles.append(rotary.register_forward_hook(_rope_in_compute_dtype(compute)))
    hooks.handles += [norm.register_forward_hook(_round_norm_output) for norm in norms]
    setattr(base, _HOOKS_ATTRIBUTE, hooks)
    return hooks


def keeps_fp32_residual_stream(model: nn.Module) -> bool:
    """Whether `keep_residual_stream_fp32` hooked `model` (or the base model of its PEFT wrapper).

    FSDP2 must then leave its decoder layers' inputs alone (`MixedPrecisionPolicy(cast_forward_inputs=False)`
    on those units, distributed/fsdp.py): its default casts every layer's input, the residual stream, to
    `param_dtype`, which rounds the stream to 16 bits once per layer."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return isinstance(getattr(base, _HOOKS_ATTRIBUTE, None), ResidualStreamHooks)


def _widen_embedding(compute: _ComputeDtype):
    def hook(module: nn.Module, args, output: torch.Tensor) -> torch.Tensor | None:
        compute.dtype = compute_dtype(output)
        if not _is_16_bit(compute.dtype):
            return None
        return output.to(compute.dtype).float()  # rounded as the engine's bf16 table holds it, then widened
    return hook


def _rope_in_compute_dtype(compute: _ComputeDtype):
    def hook(module: nn.Module, args, output: tuple[torch.Tensor, torch.Tensor]):
        if compute.dtype is None or not _is_16_bit(compute.dtype):
            return None
        cos, sin = output
        return cos.to(compute.dtype), sin.to(compute.dtype)
    return hook


def _round_norm_output(module: nn.Module, args, output: torch.Tensor) -> torch.Tensor | None:
    dtype = compute_dtype(module.weight)
    if not _is_16_bit(dtype) or output.dtype == dtype:
        return None
    return output.to(dtype)
