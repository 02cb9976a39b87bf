"""Canonical (TP=1, global layer index) Megatron weights <-> HF Llama/Qwen2/Qwen3 state dicts.

Megatron fuses Q, K and V into one `linear_qkv` whose rows are grouped per query group (GQA):
`[num_groups, (heads_per_group + 2) * head_dim, hidden]` = for each group its query heads, then its key
head, then its value head. SwiGLU's `linear_fc1` is `[gate; up]` (the canonical, TP-merged form holds the
full gate then the full up projection). Vocabulary rows beyond the real vocabulary are TP padding.
"""

from __future__ import annotations

import torch

from hybridrl.models.megatron.layout import MegatronCheckpointError
from hybridrl.models.megatron.spec import GptSpec

_ATTN = "self_attention"


def split_qkv(fused: torch.Tensor, spec: GptSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) from a fused QKV weight `(ng*(qpg+2)*hd, hidden)` or bias `(ng*(qpg+2)*hd,)`."""
    groups, per_group, hd = spec.num_kv_heads, spec.num_heads // spec.num_kv_heads, spec.head_dim
    grouped = fused.reshape(groups, per_group + 2, hd, *fused.shape[1:])
    q = grouped[:, :per_group].reshape(groups * per_group * hd, *fused.shape[1:])
    k = grouped[:, per_group].reshape(groups * hd, *fused.shape[1:])
    v = grouped[:, per_group + 1].reshape(groups * hd, *fused.shape[1:])
    return q, k, v


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: GptSpec) -> torch.Tensor:
    """Inverse of `split_qkv`."""
    groups, per_group, hd = spec.num_kv_heads, spec.num_heads // spec.num_kv_heads, spec.head_dim
    rest = q.shape[1:]
    parts = [q.reshape(groups, per_group, hd, *rest), k.reshape(groups, 1, hd, *rest),
             v.reshape(groups, 1, hd, *rest)]
    return torch.cat(parts, dim=1).reshape(groups * (per_group + 2) * hd, *rest)


class _Taker:
    """Pops keys from a state dict so that leftovers (weights nobody converted) can be reported."""

    def __init__(self, state: dict[str, torch.Tensor], what: str):
        self.state = dict(state)
        self.what = what

    def take(self, key: str) -> torch.Tensor:
        if key not in self.state:
            raise MegatronCheckpointError(f"{self.what} has no {key!r}")
        return self.state.pop(key)

    def maybe(self, key: str) -> torch.Tensor | None:
        return self.state.pop(key, None)

    def check_empty(self) -> None:
        if self.state:
            keys = sorted(self.state)
            raise MegatronCheckpointError(
                f"{self.what} has {len(keys)} weights this converter does not understand (e.g. "
                f"{keys[:5]}); supported: dense GPT weights (no MoE, no biases except on QKV)")


def _trim_vocab(weight: torch.Tensor, vocab_size: int, key: str) -> torch.Tensor:
    if weight.shape[0] < vocab_size:
        raise MegatronCheckpointError(f"{key} has {weight.shape[0]} rows but the HF vocabulary has {vocab_size}")
    return weight[:vocab_size]


def _renamed(spec: GptSpec) -> list[tuple[str, str]]:
    """(Megatron name, HF name) inside one layer of the weights that only change names, both ways."""
    pairs = [(f"{_ATTN}.linear_proj.weight", "self_attn.o_proj.weight"),
             ("input_layernorm.weight", "input_layernorm.weight"),
             ("pre_mlp_layernorm.weight", "post_attention_layernorm.weight"),
             ("mlp.linear_fc2.weight", "mlp.down_proj.weight")]
    if spec.qk_layernorm:
        pairs += [(f"{_ATTN}.q_layernorm.weight", "self_attn.q_norm.weight"),
                  (f"{_ATTN}.k_layernorm.weight", "self_attn.k_norm.weight")]
    return pairs


def _layer_to_hf(src: _Taker, i: int, spec: GptSpec) -> dict[str, torch.Tensor]:
    m, h = f"decoder.layers.{i}.", f"model.layers.{i}."
    out = {}
    q, k, v = split_qkv(src.take(f"{m}{_ATTN}.linear_qkv.weight"), spec)
    out.update({f"{h}self_attn.q_proj.weight": q, f"{h}self_attn.k_proj.weight": k,
                f"{h}self_attn.v_proj.weight": v})
    if spec.qkv_bias:
        qb, kb, vb = split_qkv(src.take(f"{m}{_ATTN}.linear_qkv.bias"), spec)
        out.update({f"{h}self_attn.q_proj.bias": qb, f"{h}self_attn.k_proj.bias": kb,
                    f"{h}self_attn.v_proj.bias": vb})
    out.update({h + hf: src.take(m + mg) for mg, hf in _renamed(spec)})
    gate, up = torch.chunk(src.take(f"{m}mlp.linear_fc1.weight"), 2, dim=0)
    out.update({f"{h}mlp.gate_proj.weight": gate, f"{h}mlp.up_proj.weight": up})
    return out


def megatron_to_hf(canonical: dict[str, torch.Tensor], spec: GptSpec) -> dict[str, torch.Tensor]:
    """HF state dict (`model.*`, `lm_head.weight`) from canonical Megatron weights; unknown leftovers raise."""
    src = _Taker(canonical, "the Megatron checkpoint")
    embed = src.take("embedding.word_embeddings.weight")
    out = {"model.embed_tokens.weight": _trim_vocab(embed, spec.vocab_size, "embedding.word_embeddings.weight")}
    for i in range(spec.num_layers):
        out.update(_layer_to_hf(src, i, spec))
    out["model.norm.weight"] = src.take("decoder.final_layernorm.weight")
    head = src.maybe("output_layer.weight")  # a tied model's last PP stage keeps a copy: ignore it
    if not spec.tie_embeddings:
        if head is None:
            raise MegatronCheckpointError("the checkpoint has untied embeddings but no output_layer.weight")
        out["lm_head.weight"] = _trim_vocab(head, spec.vocab_size, "output_layer.weight")
    src.check_empty()
    return {k: v.contiguous() for k, v in out.items()}


def _pad_vocab(weight: torch.Tensor, padded: int) -> torch.Tensor:
    """Pad rows the way Megatron-LM's checkpoint tools do: repeat the last real row."""
    extra = padded - weight.shape[0]
    return torch.cat([weight, weight[-1:].expand(extra, -1)]) if extra > 0 else weight


def _layer_from_hf(src: _Taker, i: int, spec: GptSpec) -> dict[str, torch.Tensor]:
    m, h = f"decoder.layers.{i}.", f"model.layers.{i}."
    a = f"{h}self_attn."
    out = {f"{m}{_ATTN}.linear_qkv.weight": fuse_qkv(src.take(f"{a}q_proj.weight"), src.take(f"{a}k_proj.weight"),
                                                      src.take(f"{a}v_proj.weight"), spec)}
    if spec.qkv_bias:
        out[f"{m}{_ATTN}.linear_qkv.bias"] = fuse_qkv(src.take(f"{a}q_proj.bias"), src.take(f"{a}k_proj.bias"),
                                                      src.take(f"{a}v_proj.bias"), spec)
    out.update({m + mg: src.take(h + hf) for mg, hf in _renamed(spec)})
    out[f"{m}mlp.linear_fc1.weight"] = torch.cat([src.take(f"{h}mlp.gate_proj.weight"),
                                                  src.take(f"{h}mlp.up_proj.weight")])
    return out


def hf_to_megatron(hf_state: dict[str, torch.Tensor], spec: GptSpec, padded_vocab: int) -> dict[str, torch.Tensor]:
    """Canonical Megatron weights from an HF state dict, vocabulary padded to `padded_vocab` rows."""
    src = _Taker(hf_state, "the HF model")
    embed = src.take("model.embed_tokens.weight")
    out = {"embedding.word_embeddings.weight": _pad_vocab(embed, padded_vocab)}
    for i in range(spec.num_layers):
        out.update(_layer_from_hf(src, i, spec))
    out["decoder.final_layernorm.weight"] = src.take("model.norm.weight")
    head = src.maybe("lm_head.weight")
    if not spec.tie_embeddings:
        if head is None:
            raise MegatronCheckpointError("the HF model has untied embeddings but no lm_head.weight")
        out["output_layer.weight"] = _pad_vocab(head, padded_vocab)
    src.check_empty()
    return {k: v.contiguous() for k, v in out.items()}
