"""Layers shared by the engine's model files: norms, rotary embedding, fused linears, MLP, paged attention.

Fused linears carry a `weight_loader(param, tensor, shard_id)` that copies one HF checkpoint tensor
(e.g. `k_proj.weight`) into its slice of the fused parameter (`qkv_proj.weight`).
"""

from __future__ import annotations

import functools
import torch
import torch.nn.functional as F
from torch import nn

from hybridrl.models.rope import RotaryEmbedding, build_rotary  # noqa: F401  (the engine's models import them here)
from hybridrl.rollout.engine.attention import TORCH_BACKEND, AttentionBackend
from hybridrl.rollout.engine.attention.metadata import AttentionMetadata
from hybridrl.rollout.engine.parallel import SINGLE, TensorParallel, rank_slice


def default_weight_loader(param: torch.Tensor, loaded: torch.Tensor, shard_id: object = None) -> None:
    if param.shape != loaded.shape:
        raise ValueError(f"weight shape {tuple(loaded.shape)} does not match the engine's {tuple(param.shape)}")
    param.data.copy_(loaded)


# Triton kernels for norms, RoPE and SiLU-and-mul on CUDA tensors (fused_ops.py); False: the torch code
# below everywhere (the reference the kernels are tested against).
USE_FUSED_OPS = True


@functools.cache
def _fused_ops_module():
    try:
        from hybridrl.rollout.engine import fused_ops
    except ImportError:  # no Triton
        return None
    return fused_ops


def fused_ops_for(x: torch.Tensor):
    """The fused_ops module when `x` should use it (CUDA, Triton importable), else None.

    Called per layer and op in eager prefill: the import is resolved once."""
    return _fused_ops_module() if USE_FUSED_OPS and x.is_cuda else None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Normalise x in fp32 and scale it, output in the weight's dtype; with `residual`, add it first (in
        the wider dtype of the two) and also return the sum.

        Rounds as HF's `weight * normalised.to(input dtype)`: a 16-bit input (the q/k norms, a 16-bit residual
        stream) is rounded before the scale and after it; an fp32 input (the fp32 residual stream, docs/design.md
        "Numerics shared by the engine and the trainer") once, after it.
        """
        fused = fused_ops_for(x)
        if fused is not None:
            return fused.rms_norm(x, self.weight, self.eps, residual)
        if residual is not None:
            x = x + residual
            residual = x
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        out = (self.weight * h.to(x.dtype)).to(self.weight.dtype)
        return out if residual is None else (out, residual)


class MergedLinear(nn.Linear):
    """Several HF linears sharing an input, fused along the output dim; shard ids name the parts. With
    tensor parallelism it is column-parallel: each rank holds its 1/tp of every part's rows."""

    def __init__(self, in_features: int, shard_sizes: dict[object, int], bias: bool,
                 tp: TensorParallel = SINGLE, slices: dict[object, int] | None = None) -> None:
        # `slices`: parts cut fewer ways than tp (KV heads replicated over ranks); default tp ways
        self.slices = {shard_id: (slices or {}).get(shard_id, tp.size) for shard_id in shard_sizes}
        local = {shard_id: tp.shard(size, f"output rows of part {shard_id!r}", self.slices[shard_id])
                 for shard_id, size in shard_sizes.items()}
        super().__init__(in_features, sum(local.values()), bias=bias)
        self.tp, self.full_sizes = tp, list(shard_sizes.values())
        self.shard_offsets: dict[object, tuple[int, int]] = {}
        offset = 0
        for shard_id, size in local.items():
            self.shard_offsets[shard_id] = (offset, size)
            offset += size
        for param in self.parameters():
            param.weight_loader = self.weight_loader

    def weight_loader(self, param: torch.Tensor, loaded: torch.Tensor, shard_id: object = None) -> None:
        if shard_id is None:  # the checkpoint already holds the fused tensor (Phi-3)
            if self.tp.size > 1:
                parts = zip(self.slices.values(), loaded.split(self.full_sizes, 0))
                loaded = torch.cat([rank_slice(part, self.tp, 0, slices) for slices, part in parts])
            default_weight_loader(param, loaded)
            return
        offset, size = self.shard_offsets[shard_id]
        default_weight_loader(param.data.narrow(0, offset, size), rank_slice(loaded, self.tp, 0, self.slices[shard_id]))


class RowParallelLinear(nn.Module):
    """y = x W^T + b with W's input dimension split over the ranks: each rank holds W[:, its slice], its
    partial product is all-reduced, the bias is added once after. With one rank: `F.linear`."""

    def __init__(self, in_features: int, out_features: int, bias: bool, tp: TensorParallel = SINGLE,
                 what: str = "in_features") -> None:
        super().__init__()
        self.tp = tp
        self.weight = nn.Parameter(torch.empty(out_features, tp.shard(in_features, what)))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.weight.weight_loader = self._load_weight

    def _load_weight(self, param: torch.Tensor, loaded: torch.Tensor, shard_id: object = None) -> None:
        default_weight_loader(param, rank_slice(loaded, self.tp, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return F.linear(x, self.weight, self.bias)
        y = self.tp.all_reduce(F.linear(x, self.weight))
        return y + self.bias if self.bias is not None else y


class SiluAndMulMLP(nn.Module):
    """SwiGLU MLP: down(silu(gate(x)) * up(x)) with gate and up fused (tensor parallel: each rank's slice
    of the intermediate width, column- then row-parallel)."""

    def __init__(self, hidden_size: int, intermediate_size: int, tp: TensorParallel = SINGLE) -> None:
        super().__init__()
        tp.shard(intermediate_size, "intermediate_size")
        self.gate_up_proj = MergedLinear(hidden_size, {0: intermediate_size, 1: intermediate_size}, bias=False, tp=tp)
        self.down_proj = RowParallelLinear(intermediate_size, hidden_size, bias=False, tp=tp, what="intermediate_size")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fused = fused_ops_for(x)
        if fused is not None:
            return self.down_proj(fused.silu_and_mul(self.gate_up_proj(x)))
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class PagedAttention(nn.Module):
    """Stores new K/V into this layer's paged cache, then attends (ragged prefill or batched decode)."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, sliding_window: int | None) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scale = head_dim ** -0.5
        self.sliding_window = sliding_window
        self.backend: AttentionBackend = TORCH_BACKEND
        self.k_cache = self.v_cache = torch.empty(0)  # bound by the model runner

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata,
                rotary: RotaryEmbedding, positions: torch.Tensor) -> torch.Tensor:
        """q (N, Hq, D), k/v (N, Hkv, D) before RoPE, at positions (N,) -> (N, Hq * D)."""
        q = self._rotate_and_store(q, k, v, meta, rotary, positions)
        if meta.is_prefill:
            out = self.backend.paged_prefill_attention(q, self.k_cache, self.v_cache, meta, self.scale,
                                                       self.sliding_window)
        else:
            out = self.backend.paged_decode_attention(
                q, self.k_cache, self.v_cache, meta.block_tables, meta.context_lens, self.scale,
                self.sliding_window)
        return out.reshape(q.shape[0], -1)

    def _rotate_and_store(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata,
                          rotary: RotaryEmbedding, positions: torch.Tensor) -> torch.Tensor:
        """Rotate q and k, write k and v to this layer's cache; return the rotated q. One Triton kernel on
        CUDA (q rotated in place: it is a fresh view of the layer's projection or q-norm output)."""
        fused = fused_ops_for(q)
        if fused is not None and q.dtype == self.k_cache.dtype:
            return fused.rotary_store_kv(q, k, v, positions, rotary.cos, rotary.sin, rotary.rot_dim,
                                         self.k_cache, self.v_cache, meta.slot_mapping)
        q, k = rotary(positions, q, k)
        self.backend.store_kv_cache(k, v, self.k_cache, self.v_cache, meta.slot_mapping)
        return q


def layer_sliding_window(config: object, layer_idx: int) -> int | None:
    """The sliding window of layer `layer_idx` (HF: all layers, or those `layer_types` marks sliding)."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and layer_types[layer_idx] != "sliding_attention":
        return None
    return window or None
