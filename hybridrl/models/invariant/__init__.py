"""Batch-invariant numerics shared by the rollout engine and the trainer (`actor_rollout_ref.model.batch_invariant`).

The engine and the trainer compute the same token's log-prob from the same weights, but with kernels chosen
for their shapes (a 512-row decode step, a 20,000-token micro-batch), which sum in different orders and so
round differently: the rollout/trainer log-prob gap, large enough at 7B to need rollout correction. In this
mode both sides run the same Triton kernels for everything whose rounding depends on the batch, each
computing a token the same way whatever else shares its launch: the linear layers (`matmul`), attention
(`attention`: paged for the engine, dense rows for the trainer, one kernel), the token log-probs (`log_probs`),
and the RMSNorm the two sides already share. `hf.use_batch_invariant_numerics` sets an HF model up;
`rollout/engine/batch_invariant.py` the engine. The modules here import Triton; this one does not.
"""

from __future__ import annotations

import os

import torch
from torch import nn

MARK = "_hybridrl_batch_invariant"


def check_device(tensor: torch.Tensor) -> None:
    """The kernels run on CUDA (on CPU only under TRITON_INTERPRET=1, the tests' Triton interpreter)."""
    if not tensor.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"actor_rollout_ref.model.batch_invariant=true runs Triton kernels on CUDA devices; this "
                         f"forward is on {tensor.device}. Run on a GPU or set it to false")


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records an operation on `tensors` (the kernels then pair their value with a gradient)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def uses_batch_invariant_numerics(model: nn.Module) -> bool:
    """Whether `hf.use_batch_invariant_numerics` set `model` (or its PEFT wrapper's base) up."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return bool(getattr(base, MARK, False))
