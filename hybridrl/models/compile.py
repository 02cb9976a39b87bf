"""Regional torch.compile of a model's repeated decoder layers (`use_torch_compile`).

Each decoder layer is compiled in place (`nn.Module.compile`): parameter names, state dicts and weight
sync are unchanged, forward hooks (FSDP2) and HF's gradient checkpointing stay outside the compiled
region, and the layers share one compiled graph (the same code; parameters are graph inputs), so a
24-layer model costs one compilation per mode (train/eval, grad/no-grad, first dynamic shape). Inductor
fuses what eager HF code runs as separate kernels — RMSNorm, RoPE, SiLU-and-mul, residual adds, casts —
in forward, recompute and backward; the GEMMs and attention stay cuBLAS/SDPA.

Only on CUDA: on CPU, Inductor needs a C++ toolchain and pays minutes of compilation that tiny models
never earn back, so CPU runs stay eager (logged).
"""

from __future__ import annotations

import functools

import torch

from hybridrl.logging.log import get_logger
from hybridrl.models.hf import decoder_of
from hybridrl.utils.collectives import is_rank0

log = get_logger(__name__)


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The ModuleList of repeated blocks in the model's body (`model.model.layers` for HF decoders)."""
    body = decoder_of(model)
    for name in ("layers", "h", "blocks", "decoder_layers"):
        layers = getattr(body, name, None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers):
            return layers
    raise ValueError(f"{type(body).__name__} has no ModuleList of decoder layers (looked for layers, h, blocks); "
                     "set actor_rollout_ref.actor.use_torch_compile=false (and the ref/critic keys) for this model")


class CompileError(RuntimeError):
    """torch.compile could not compile a decoder layer of this model."""


def compile_decoder_layers(model: torch.nn.Module, device: torch.device, role: str, *, enabled: bool,
                           off_key: str, backend: str = "inductor") -> int:
    """Compile each decoder layer in place when `enabled` and on CUDA (or always with a non-Inductor
    `backend`, which tests use on CPU); returns how many layers were compiled. A compilation failure
    (on a layer's first call) raises CompileError naming `off_key`, the setting that turns this off."""
    if not enabled:
        return 0
    if device.type != "cuda" and backend == "inductor":
        if is_rank0():
            log.info("%s: use_torch_compile applies on CUDA; this %s run stays eager", role, device.type)
        return 0
    layers = decoder_layers(model)
    _allow_recompiles()
    for layer in layers:
        # What nn.Module.compile does (the compiled call replaces _call_impl), plus an actionable error.
        layer._compiled_call_impl = _explained(torch.compile(layer._call_impl, backend=backend), role, off_key)
    if is_rank0():
        log.info("%s: torch.compile (%s) on its %d decoder layers; the first steps include compilation", role,
                 backend, len(layers))
    return len(layers)


def _allow_recompiles(limit: int = 32) -> None:
    """Every compiled layer shares one code object (`Module._call_impl`), whose cache holds a graph per
    role x mode (train / no-grad) x shape regime (first shape, then dynamic); Dynamo's default limit of 8
    would send the ninth back to eager. Raised, never lowered, for this process."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(getattr(config, name), limit))


def _explained(compiled, role: str, off_key: str):
    @functools.wraps(compiled)
    def call(*args, **kwargs):
        try:
            return compiled(*args, **kwargs)
        except torch._dynamo.exc.TorchDynamoException as err:
            cause = getattr(err, "inner_exception", None) or err
            first_line = (str(cause).strip().splitlines() or ["no message"])[0]
            raise CompileError(
                f"torch.compile failed on a decoder layer of the {role} ({type(cause).__name__}: {first_line}); "
                f"set {off_key}=false to run this model eagerly (slower, same results)") from err
    return call
