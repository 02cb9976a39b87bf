"""The trainer's half of the batch-invariant numerics: an HF decoder computing as the rollout engine does.

`use_batch_invariant_numerics(model)` (with the fp32 residual stream of models/numerics.py already on) routes
every operation whose rounding depends on the batch through the kernels the engine runs in this mode:
- the decoder's linear layers: `matmul.linear` (the engine's fused q/k/v and gate/up run the same kernel);
- the RMSNorms: the engine's Triton RMSNorm (models/rms_norm.py), one program per row;
- attention: `attention.dense_causal_attention` (registered with transformers as `ATTENTION_NAME`);
- RoPE: cos/sin read from the engine's own table (models/rope.py), so both sides rotate by the same values;
- the LM head and the token log-probs (workers/forward.py reads `uses_batch_invariant_numerics`).
SwiGLU, the residual adds and the embedding are elementwise: PyTorch computes them the same way at any batch.

In a training forward each operation's value is the invariant kernel's and its gradient the plain operation's
(attention: `AttentionValue`, SDPA run in backward; RMSNorm: its formula's, `RMSNormValue`; a no-grad forward, such
as old_log_prob's, runs only the kernel).
"""

from __future__ import annotations

import functools
import types

import torch
import torch.nn.functional as F
from torch import nn

from hybridrl.models.invariant import MARK, needs_grad
from hybridrl.models.invariant.attention import dense_causal_attention
from hybridrl.models.invariant.matmul import linear
from hybridrl.models.rms_norm import rms_norm

ATTENTION_NAME = "hybridrl_batch_invariant"


def in_compute_dtype(weight: torch.Tensor, *tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """`weight` and `tensors` in the forward's compute dtype (autocast's where it is on, as `F.linear` would cast
    them; else the weight's own: under FSDP2 its unsharded `param_dtype` copy)."""
    from hybridrl.models.numerics import compute_dtype

    dtype = compute_dtype(weight)
    return [t.to(dtype) if t is not None else None for t in (weight, *tensors)]


def linear_module_forward(self: nn.Module, x: torch.Tensor, product=linear) -> torch.Tensor:
    """A linear layer's forward (`self.weight`, `self.bias`) in the compute dtype by `product`: `matmul.linear` in
    the trainer, `matmul.agreeing_linear` (the same bits) in the engine."""
    weight, x, bias = in_compute_dtype(self.weight, x, self.bias)
    return product(x, weight, bias)


class RMSNormValue(torch.autograd.Function):
    """`RMSNormValue.apply(x, weight, eps)`: the engine's RMSNorm kernel's value, with the gradient of HF's formula
    y = w * round(x * r), r = rsqrt(mean(x^2) + eps), computed in fp32 from x (no second, plain forward to
    differentiate): dx = r * (g' - x̂ * mean(g' * x̂)) with g' = g * w and x̂ = x * r; dw = sum over rows of
    g * round(x̂)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return rms_norm(x, weight, eps)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        h = x.float()
        inv = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + ctx.eps)
        normed = h * inv
        grad = grad.float()
        grad_normed = grad * weight.float()
        grad_x = inv * (grad_normed - normed * (grad_normed * normed).mean(-1, keepdim=True))
        grad_weight = (grad * normed.to(x.dtype).float()).reshape(-1, x.shape[-1]).sum(0)
        return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None


def _rms_norm_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The engine's RMSNorm kernel, with the weight in the compute dtype as the engine holds it."""
    eps = getattr(self, "variance_epsilon", getattr(self, "eps", 1e-6))
    weight, = in_compute_dtype(self.weight)
    if not needs_grad(x, weight):
        return rms_norm(x, weight, eps)
    return RMSNormValue.apply(x, weight, eps)


def row_starts(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each row's first token column (int32 (B,)) from the 2-D padding mask. A row must be one run of tokens (left
    padding, then tokens, then right padding), as verl lays out prompt + response."""
    mask = attention_mask.bool()
    starts = mask.int().argmax(-1)
    ends = mask.shape[-1] - mask.flip(-1).int().argmax(-1)
    if not bool((mask.sum(-1) == ends - starts).all()):
        raise ValueError("actor_rollout_ref.model.batch_invariant: a micro-batch row holds padding between its "
                         "tokens; batch-invariant attention takes rows that are one run of tokens (verl's layout)")
    return starts.int()


def _row_starts_mask(*args, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor | None:
    """The "mask" transformers builds once per forward and hands every attention layer: each row's first token
    column (`row_starts`), or None without padding."""
    return row_starts(attention_mask) if attention_mask is not None else None


def _reference_attention(query, key, value, starts, scaling, sliding_window) -> torch.Tensor:
    """The same attention by PyTorch's SDPA (differentiable), (B, T, Hq, D): the gradient of a training forward."""
    from hybridrl.models.attention import without_cudnn_attention

    width = query.shape[2]
    gqa = query.shape[1] != key.shape[1]
    with without_cudnn_attention():
        if starts is None and not sliding_window:
            out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling, enable_gqa=gqa)
        else:
            cols = torch.arange(width, device=query.device)
            allowed = cols[None, :] <= cols[:, None]
            if sliding_window:
                allowed &= cols[None, :] > cols[:, None] - sliding_window
            allowed = allowed[None, None]
            if starts is not None:
                allowed = allowed & (cols[None, :] >= starts[:, None])[:, None, None, :]
            allowed = allowed | torch.eye(width, dtype=torch.bool, device=query.device)  # padding rows: no NaN
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed, scale=scaling, enable_gqa=gqa)
    return out.transpose(1, 2)


class AttentionValue(torch.autograd.Function):
    """`AttentionValue.apply(q, k, v, starts, scale, sliding_window)`: the batch-invariant kernel's attention, with
    the gradient of PyTorch's SDPA over the same rows (`_reference_attention`), which runs in backward only: under
    activation checkpointing the forward runs twice and the reference once, not twice."""

    @staticmethod
    def forward(ctx, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, starts: torch.Tensor | None,
                scale: float, sliding_window: int | None) -> torch.Tensor:
        ctx.save_for_backward(query, key, value, starts)
        ctx.scale, ctx.sliding_window = scale, sliding_window
        return _kernel_attention(query, key, value, starts, scale, sliding_window)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        query, key, value, starts = ctx.saved_tensors
        q, k, v = (t.detach().requires_grad_() for t in (query, key, value))
        with torch.enable_grad():
            out = _reference_attention(q, k, v, starts, ctx.scale, ctx.sliding_window)
        return (*torch.autograd.grad(out, (q, k, v), grad), None, None, None)


def _kernel_attention(query, key, value, starts, scale, sliding_window) -> torch.Tensor:
    rows = starts if starts is not None else torch.zeros(query.shape[0], dtype=torch.int32, device=query.device)
    return dense_causal_attention(query, key, value, rows, scale, sliding_window)


def batch_invariant_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                              attention_mask: torch.Tensor | None, scaling: float | None = None,
                              dropout: float = 0.0, sliding_window: int | None = None, **kwargs
                              ) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: q (B, Hq, T, D), k/v (B, Hkv, T, D) -> ((B, T, Hq, D), None);
    `attention_mask`: the rows' first token columns (`_row_starts_mask`) or None."""
    if dropout:
        raise ValueError("actor_rollout_ref.model.batch_invariant: attention dropout is not supported; set the "
                         "model's attention_dropout to 0")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    starts = attention_mask  # `_row_starts_mask`'s
    if needs_grad(query, key, value):
        return AttentionValue.apply(query, key, value, starts, scale, sliding_window), None
    return _kernel_attention(query, key, value, starts, scale, sliding_window), None


@functools.cache
def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, batch_invariant_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _row_starts_mask)


class _EngineRope:
    """cos/sin from the engine's table (`build_rotary` on the forward's device), grown as positions need."""

    def __init__(self, config, head_dim: int) -> None:
        self.config, self.head_dim = config, head_dim
        self.table = None

    def __call__(self, module: nn.Module, args, output: tuple[torch.Tensor, torch.Tensor]):
        from hybridrl.models.rope import build_rotary

        x, position_ids = args[0], args[1]
        needed = int(position_ids.max()) + 1
        table = self.table
        if table is None or table.cos.shape[0] < needed or table.cos.device != x.device:
            size = max(4096, 1 << (needed - 1).bit_length())
            with torch.device(x.device):
                table = self.table = build_rotary(self.config, self.head_dim, size)
        cos, sin = output
        return table.cos[position_ids].to(cos.dtype), table.sin[position_ids].to(sin.dtype)


def _linears(base: nn.Module) -> None:
    for module in _body(base).modules():
        if isinstance(module, nn.Linear):
            module.forward = types.MethodType(linear_module_forward, module)


def _rms_norms(base: nn.Module) -> None:
    for module in _body(base).modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = types.MethodType(_rms_norm_forward, module)


def _attention(base: nn.Module) -> None:
    _register_attention()
    base.config._attn_implementation = ATTENTION_NAME


def _rope(base: nn.Module) -> None:
    config = base.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    _body(base).rotary_emb.register_forward_hook(_EngineRope(config, head_dim))


def _lm_head_and_log_probs(base: nn.Module) -> None:
    setattr(base, MARK, True)  # workers/forward.py reads it (`uses_batch_invariant_numerics`)


def _body(base: nn.Module) -> nn.Module:
    return getattr(base, base.base_model_prefix)


# What `use_batch_invariant_numerics` switches, family by family (benchmarks/mismatch_bench.py switches one at a time)
FAMILIES = {"linear": _linears, "rms_norm": _rms_norms, "attention": _attention, "rope": _rope,
            "lm_head_log_probs": _lm_head_and_log_probs}


def use_batch_invariant_numerics(model: nn.Module) -> None:
    """Route `model`'s batch-dependent operations through the engine's batch-invariant kernels (module doc)."""
    from hybridrl.models.numerics import ENGINE_MODEL_TYPES, keeps_fp32_residual_stream

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if base.config.model_type not in ENGINE_MODEL_TYPES:
        raise ValueError(f"actor_rollout_ref.model.batch_invariant: model type {base.config.model_type!r} is not one "
                         f"the rollout engine runs ({', '.join(sorted(ENGINE_MODEL_TYPES))}); set it to false")
    if not keeps_fp32_residual_stream(base):
        raise ValueError("actor_rollout_ref.model.batch_invariant needs actor_rollout_ref.model.fp32_residual_stream"
                         "=true (the engine's residual stream is fp32 in this mode)")
    for switch in FAMILIES.values():
        switch(base)
