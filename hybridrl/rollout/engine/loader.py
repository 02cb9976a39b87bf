"""Building the engine's model from an in-memory HF model or an HF model directory (config + safetensors)."""

from __future__ import annotations

import glob
import os
from typing import Iterator

import torch

from hybridrl.rollout.engine.models import build_model, load_weights
from hybridrl.rollout.engine.parallel import SINGLE, TensorParallel
from hybridrl.utils.scoped import temporarily


def default_dtype(dtype: torch.dtype):
    """Create parameters directly in `dtype` (no full-precision copy of a large model on the way)."""
    return temporarily(torch.get_default_dtype, torch.set_default_dtype, dtype)


def iter_safetensors(path: str) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in model directory {path!r}; save the model with "
                                "save_pretrained(..., safe_serialization=True)")
    for file in files:
        with safe_open(file, framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def eos_ids_of(source: object, config: object) -> set[int]:
    """EOS ids from the model's generation_config and config (int or list)."""
    ids: set[int] = set()
    gen_config = getattr(source, "generation_config", None)
    if isinstance(source, str):
        try:
            from transformers import GenerationConfig

            gen_config = GenerationConfig.from_pretrained(source)
        except (OSError, ValueError):
            gen_config = None
    for holder in (gen_config, config):
        value = getattr(holder, "eos_token_id", None)
        if value is not None:
            ids.update([value] if isinstance(value, int) else value)
    return ids


def residual_dtype(dtype: torch.dtype, fp32_residual: bool) -> torch.dtype | None:
    """The engine model's `residual_dtype`: fp32 for 16-bit weights with `fp32_residual`, else None (the
    weights' own dtype)."""
    return torch.float32 if fp32_residual and dtype.itemsize < 4 else None


def build_engine_model(source: torch.nn.Module | str, dtype: torch.dtype | None, device: torch.device,
                       max_model_len: int | None, tp: TensorParallel = SINGLE, fp32_residual: bool = True):
    """The engine model on `device` in `dtype` (default: the source's dtype), weights copied from `source`
    (with tensor parallelism, this rank's slices of them). `fp32_residual`: keep the residual stream in fp32
    when the weights are 16-bit, as the trainer's forward does (hybridrl/models/numerics.py).

    Returns (model, config, max_model_len, eos ids).
    """
    if isinstance(source, str):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(source)
        dtype = dtype or getattr(config, "dtype", None) or torch.float32
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        named = iter_safetensors(source)
    else:
        config = source.config
        dtype = dtype or next(source.parameters()).dtype
        named = source.named_parameters()
    max_model_len = max_model_len or config.max_position_embeddings
    # fork_rng: the layers' throwaway random init (every weight is loaded next) must not move the caller's
    # RNG, or a tensor-parallel rank (smaller layers, fewer draws) would initialise later modules (a fresh
    # value head) differently from one process
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), default_dtype(dtype), torch.device(device):
        model = build_model(config, max_model_len, tp, residual_dtype(dtype, fp32_residual))
    loaded = load_weights(model, named)
    missing = {name for name, _ in model.named_parameters()} - loaded
    if missing:
        raise ValueError(f"the checkpoint lacks weights for {sorted(missing)[:5]} "
                         f"({len(missing)} engine parameters left uninitialised)")
    return model.eval(), config, max_model_len, eos_ids_of(source, config)
