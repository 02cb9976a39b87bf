"""Megatron parameter names: one canonical spelling and how each tensor is split across TP ranks.

Canonical names are megatron-core's with the local (non-TransformerEngine) layer spec and global layer
indices, e.g. `decoder.layers.3.self_attention.linear_qkv.weight`. TransformerEngine spells the fused
pre-norms `linear_qkv.layer_norm_weight` / `linear_fc1.layer_norm_weight`; legacy Megatron-LM (before
mcore) used `language_model.encoder.layers.N.self_attention.query_key_value.weight` and friends. Both
are rewritten to the canonical names on load.
"""

from __future__ import annotations

import re

import torch

# (pattern, replacement) applied in order to legacy Megatron-LM keys (`language_model.*`, top-level
# `word_embeddings_for_head`, the tied output copy on the last pipeline stage).
_LEGACY_PREFIXES = [
    (r"^language_model\.embedding\.word_embeddings\.", "embedding.word_embeddings."),
    (r"^language_model\.embedding\.position_embeddings\.", "embedding.position_embeddings."),
    (r"^language_model\.(?:encoder|transformer)\.layers\.(\d+)\.", r"decoder.layers.\1."),
    (r"^language_model\.(?:encoder|transformer)\.final_(?:layernorm|norm)\.", "decoder.final_layernorm."),
    (r"^language_model\.output_layer\.", "output_layer."),
    (r"^word_embeddings_for_head\.", "output_layer."),
]
_LEGACY_LAYER = [
    (r"\.(?:self_attention|attention)\.query_key_value\.", ".self_attention.linear_qkv."),
    (r"\.(?:self_attention|attention)\.dense\.", ".self_attention.linear_proj."),
    (r"\.post_attention_layernorm\.", ".pre_mlp_layernorm."),
    (r"\.mlp\.dense_h_to_4h\.", ".mlp.linear_fc1."),
    (r"\.mlp\.dense_4h_to_h\.", ".mlp.linear_fc2."),
]
# TransformerEngine fuses each pre-norm into the following linear layer.
_TE_NORMS = [
    (r"\.self_attention\.linear_qkv\.layer_norm_(weight|bias)$", r".input_layernorm.\1"),
    (r"\.mlp\.linear_fc1\.layer_norm_(weight|bias)$", r".pre_mlp_layernorm.\1"),
]


def _sub_all(key: str, rules: list[tuple[str, str]]) -> str:
    for pattern, repl in rules:
        key = re.sub(pattern, repl, key)
    return key


def canonical_key(key: str) -> str | None:
    """The canonical name of a checkpoint key, or None for non-weights (TE `_extra_state`)."""
    if key.endswith("_extra_state") or "._extra_state/" in key:
        return None
    if key.startswith("model."):  # some tools nest the module under `model`
        key = key[len("model."):]
    if key.startswith(("language_model.", "word_embeddings_for_head.")):
        key = _sub_all(_sub_all(key, _LEGACY_PREFIXES), _LEGACY_LAYER)
    return _sub_all(key, _TE_NORMS)


def canonicalize(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename every key to its canonical name and drop non-tensor entries."""
    out = {}
    for key, value in state.items():
        name = canonical_key(key)
        if name is not None and isinstance(value, torch.Tensor):
            out[name] = value
    return out


def flatten(state: dict, prefix: str = "") -> dict:
    """Legacy Megatron-LM saves nested dicts ({'language_model': {'encoder': {...}}}); join keys with '.'."""
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# Column-parallel weights (output features split) concatenate on dim 0, row-parallel ones on dim 1.
_COLUMN = ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias", "mlp.linear_fc1.weight",
           "mlp.linear_fc1.bias", "embedding.word_embeddings.weight", "output_layer.weight")
_ROW = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")


def tp_dim(key: str) -> int | None:
    """The dimension along which TP ranks hold slices of `key` (None: every rank holds a full copy)."""
    if key.endswith(_COLUMN):
        return 0
    if key.endswith(_ROW):
        return 1
    return None


def is_gated_fc1(key: str) -> bool:
    """With SwiGLU each TP rank's `linear_fc1` is [gate_r; up_r]: merging must regroup the halves."""
    return key.endswith(("mlp.linear_fc1.weight", "mlp.linear_fc1.bias"))


LAYER_KEY = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")


def offset_layers(state: dict[str, torch.Tensor], offset: int) -> dict[str, torch.Tensor]:
    """Shift local layer indices (a pipeline stage numbers its layers from 0) by `offset`."""
    out = {}
    for key, value in state.items():
        m = LAYER_KEY.match(key)
        out[f"decoder.layers.{int(m.group(1)) + offset}.{m.group(2)}" if m else key] = value
    return out


def num_layers_in(state: dict[str, torch.Tensor]) -> int:
    """Number of distinct layer indices present (layer indices of one stage are 0..n-1)."""
    return len({int(m.group(1)) for m in map(LAYER_KEY.match, state) if m})
