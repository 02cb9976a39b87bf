"""Llama 2/3 for the engine (fused qkv and gate/up); the base the other decoder-only files specialise.

Subclasses flip class attributes: `qkv_bias` (Qwen2), `qk_norm` (Qwen3); sliding windows and RoPE
scaling come from the HF config. Names match HF, except q/k/v -> qkv_proj and gate/up -> gate_up_proj.
`tp`: this rank's share of a tensor-parallel replica (parallel.py); the weight loaders slice HF tensors.
`residual_dtype`: the residual stream's dtype (fp32 with bf16 weights: the numerics the trainer's forward
shares, hybridrl/models/numerics.py); None keeps it in the weights' dtype, as a plain HF forward does.
"""

from __future__ import annotations

import torch
from torch import nn

from hybridrl.rollout.engine.attention.metadata import AttentionMetadata
from hybridrl.rollout.engine.layers import (
    MergedLinear, PagedAttention, RMSNorm, RotaryEmbedding, RowParallelLinear, SiluAndMulMLP, build_rotary,
    layer_sliding_window,
)
from hybridrl.rollout.engine.parallel import SINGLE, TensorParallel, kv_head_slices


class LlamaAttention(nn.Module):
    def __init__(self, config, layer_idx: int, rotary: RotaryEmbedding, qkv_bias: bool, o_bias: bool,
                 qk_norm: bool, tp: TensorParallel = SINGLE) -> None:
        super().__init__()
        # this rank's heads (all of them without tensor parallelism)
        self.num_heads = tp.shard(config.num_attention_heads, "num_attention_heads")
        kv_slices = kv_head_slices(config.num_key_value_heads, tp)
        self.num_kv_heads = config.num_key_value_heads // kv_slices
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        q_size = config.num_attention_heads * self.head_dim
        kv_size = config.num_key_value_heads * self.head_dim
        self.qkv_proj = MergedLinear(config.hidden_size, {"q": q_size, "k": kv_size, "v": kv_size}, bias=qkv_bias,
                                     tp=tp, slices={"k": kv_slices, "v": kv_slices})
        self.o_proj = RowParallelLinear(q_size, config.hidden_size, bias=o_bias, tp=tp, what="attention width")
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if qk_norm else None
        self.rotary_emb = rotary
        self.attn = PagedAttention(self.num_heads, self.num_kv_heads, self.head_dim,
                                   layer_sliding_window(config, layer_idx))

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        n = x.shape[0]
        q, k, v = self.qkv_proj(x).split(
            [self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, self.num_kv_heads * self.head_dim], -1)
        q = q.view(n, self.num_heads, self.head_dim)
        k = k.view(n, self.num_kv_heads, self.head_dim)
        v = v.view(n, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return self.o_proj(self.attn(q, k, v, meta, self.rotary_emb, positions))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx: int, rotary: RotaryEmbedding, qkv_bias: bool, o_bias: bool,
                 qk_norm: bool, tp: TensorParallel = SINGLE) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx, rotary, qkv_bias, o_bias, qk_norm, tp)
        self.mlp = SiluAndMulMLP(config.hidden_size, config.intermediate_size, tp)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None,
                meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            x, residual = self.input_layernorm(x), x
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(positions, x, meta)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class LlamaForCausalLM(nn.Module):
    qkv_bias = False
    qk_norm = False
    # HF checkpoint module -> (engine module, shard id of the fused parameter)
    packed_modules_mapping = {
        "q_proj": ("qkv_proj", "q"), "k_proj": ("qkv_proj", "k"), "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, config, max_positions: int, tp: TensorParallel = SINGLE,
                 residual_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if getattr(config, "mlp_bias", False):
            raise NotImplementedError(f"{type(self).__name__}: mlp_bias=True is not supported by the hybrid engine")
        self.config = config
        self.residual_dtype = residual_dtype
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        qkv_bias = self.qkv_bias or bool(getattr(config, "attention_bias", False))
        o_bias = bool(getattr(config, "attention_bias", False))
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rotary = build_rotary(config, head_dim, max_positions)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.model.layers = nn.ModuleList(
            LlamaDecoderLayer(config, i, rotary, qkv_bias, o_bias, self.qk_norm, tp)
            for i in range(config.num_hidden_layers))
        self.model.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if self.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """input_ids, positions (N,) -> final hidden states (N, hidden), in the weights' dtype.

        The residual stream (N, hidden) runs in `residual_dtype`: each sub-layer's output is added to it
        unrounded and each norm reads it at that precision (`RMSNorm`)."""
        x, residual = self.model.embed_tokens(input_ids), None
        if self.residual_dtype is not None:
            x = x.to(self.residual_dtype)
        for layer in self.model.layers:
            x, residual = layer(positions, x, residual, meta)
        x, _ = self.model.norm(x, residual)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    def attention_layers(self) -> list[PagedAttention]:
        return [layer.self_attn.attn for layer in self.model.layers]
