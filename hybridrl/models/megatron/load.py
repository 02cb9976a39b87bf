"""Megatron checkpoint -> HF model in memory (no temporary HF directory)."""

from __future__ import annotations

import argparse
import logging

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from hybridrl.models.megatron.classic import read_classic
from hybridrl.models.megatron.dist import read_dist
from hybridrl.models.megatron.hf_map import megatron_to_hf
from hybridrl.models.megatron.keys import num_layers_in
from hybridrl.models.megatron.layout import MegatronCheckpointError, MegatronLayout, detect_layout
from hybridrl.models.megatron.spec import (GptSpec, check_same_shapes, hf_config_from_spec, spec_from_args,
                                           spec_from_hf_config)

logger = logging.getLogger(__name__)


def load_megatron_state_dict(path: str) -> tuple[dict[str, torch.Tensor], argparse.Namespace | None,
                                                  MegatronLayout]:
    """Canonical (TP=1, global layer index) Megatron weights, the saved args and the detected layout."""
    layout = detect_layout(path)
    state, args = read_dist(layout) if layout.kind == "dist" else read_classic(layout)
    return state, args, layout


def _vocab_size(state: dict[str, torch.Tensor], args: argparse.Namespace | None,
                tokenizer_path: str | None) -> int:
    """The real vocabulary: args.vocab_size (written by hf-to-megatron), the tokenizer, else padded rows."""
    if getattr(args, "vocab_size", None):
        return int(args.vocab_size)
    if tokenizer_path:
        from transformers import AutoTokenizer

        return len(AutoTokenizer.from_pretrained(tokenizer_path))
    rows = state["embedding.word_embeddings.weight"].shape[0]
    logger.warning("Megatron checkpoint: real vocabulary size unknown (no args.vocab_size, hf_config_path or "
                   "tokenizer_path); keeping all %d (padded) embedding rows", rows)
    return rows


def _read_hf_config(path: str) -> PretrainedConfig:
    try:
        return AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise MegatronCheckpointError(f"could not read the HF config at {path!r} (model.hf_config_path / "
                                      f"--hf-config): {err}") from err


def resolve_config(state: dict[str, torch.Tensor], args: argparse.Namespace | None,
                   hf_config_path: str | None = None, tokenizer_path: str | None = None,
                   dtype: torch.dtype = torch.float32) -> tuple[GptSpec, PretrainedConfig]:
    """The architecture: from `hf_config_path` when given (checked against args), else inferred from args."""
    if "embedding.word_embeddings.weight" not in state:
        raise MegatronCheckpointError("the Megatron checkpoint has no embedding.word_embeddings.weight")
    hf_config = _read_hf_config(hf_config_path) if hf_config_path else None
    if args is None and hf_config is None:
        raise MegatronCheckpointError("the Megatron checkpoint has no saved args; pass an HF config "
                                      "(model.hf_config_path / --hf-config) describing the architecture")
    spec = None
    if args is not None:
        untie = getattr(args, "untie_embeddings_and_output_weights", None)
        spec = spec_from_args(
            args, vocab_size=hf_config.vocab_size if hf_config else _vocab_size(state, args, tokenizer_path),
            qkv_bias=any(k.endswith("linear_qkv.bias") for k in state),
            qk_layernorm=any(k.endswith("q_layernorm.weight") for k in state),
            tie_embeddings=(not untie) if untie is not None else "output_layer.weight" not in state)
    if hf_config is not None:
        hf_spec = spec_from_hf_config(hf_config)
        if spec is not None:
            check_same_shapes(spec, hf_spec, hf_config_path)
        return hf_spec, hf_config
    return spec, hf_config_from_spec(spec, dtype)


def _materialize_buffers(model: PreTrainedModel, config: PretrainedConfig) -> None:
    """Modules built on the meta device keep meta non-persistent buffers (RoPE `inv_freq`): rebuild them."""
    for name, module in list(model.named_modules()):
        if not any(b.is_meta for b in module.buffers(recurse=False)):
            continue
        try:
            fresh = type(module)(config=config)
        except TypeError as err:
            raise MegatronCheckpointError(f"cannot initialise the buffers of {name} ({type(module).__name__}) "
                                          f"outside the meta device: {err}") from err
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, fresh)


def build_hf_model(config: PretrainedConfig, state: dict[str, torch.Tensor], dtype: torch.dtype,
                   attn_implementation: str = "sdpa") -> PreTrainedModel:
    """An HF causal LM holding `state`, built without random initialisation (meta device + assign)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    state = {k: v.to(dtype) for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    missing = [k for k in missing if not (tied and k == "lm_head.weight")]
    if missing or unexpected:
        raise MegatronCheckpointError(f"converted weights do not fit {type(model).__name__}: missing {missing[:5]}, "
                                      f"unexpected {unexpected[:5]}")
    if tied:
        model.tie_weights()
    _materialize_buffers(model, config)
    leftover = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if leftover:
        raise MegatronCheckpointError(f"{type(model).__name__} still has uninitialised tensors {leftover[:5]}")
    return model.eval()


def load_megatron_hf_state_dict(path: str, hf_config_path: str | None = None, tokenizer_path: str | None = None,
                                dtype: torch.dtype | None = None) -> tuple[PretrainedConfig, dict[str, torch.Tensor]]:
    """The HF config and HF-named state dict of a Megatron checkpoint, for callers that build their own
    model class (e.g. a value model: AutoModelForTokenClassification + load_state_dict(strict=False))."""
    state, args, layout = load_megatron_state_dict(path)
    dtype = dtype or state["embedding.word_embeddings.weight"].dtype
    spec, config = resolve_config(state, args, hf_config_path, tokenizer_path, dtype)
    found = num_layers_in(state)
    if found != spec.num_layers:
        raise MegatronCheckpointError(f"{layout.iter_dir} holds {found} transformer layers but the architecture "
                                      f"has {spec.num_layers}")
    return config, {k: v.to(dtype) for k, v in megatron_to_hf(state, spec).items()}


def load_megatron_as_hf(path: str, hf_config_path: str | None = None, dtype: torch.dtype | None = torch.float32,
                        tokenizer_path: str | None = None, override_config: dict | None = None,
                        attn_implementation: str = "sdpa") -> PreTrainedModel:
    """The HF causal LM equivalent to the Megatron checkpoint at `path` (classic or torch_dist layout).

    `hf_config_path` (a directory with config.json) names the HF architecture; without it the
    architecture is inferred from the checkpoint args (Llama; Qwen2 with QKV bias; Qwen3 with QK norm).
    `dtype=None` keeps the checkpoint's dtype. `tokenizer_path` only helps find the real vocabulary size.
    `override_config` sets HF config attributes (e.g. dropout), as `model.override_config` does for HF paths.
    """
    config, state = load_megatron_hf_state_dict(path, hf_config_path, tokenizer_path, dtype)
    for key, value in (override_config or {}).items():
        setattr(config, key, value)
    return build_hf_model(config, state, next(iter(state.values())).dtype, attn_implementation)
