"""The engine's model implementations, keyed by HF `config.model_type`, and HF-named weight loading."""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from hybridrl.rollout.engine.layers import default_weight_loader
from hybridrl.rollout.engine.models.llama import LlamaForCausalLM
from hybridrl.rollout.engine.models.mistral import MistralForCausalLM
from hybridrl.rollout.engine.models.phi3 import Phi3ForCausalLM
from hybridrl.rollout.engine.models.qwen2 import Qwen2ForCausalLM
from hybridrl.rollout.engine.models.qwen3 import Qwen3ForCausalLM
from hybridrl.rollout.engine.parallel import SINGLE, TensorParallel

MODEL_REGISTRY: dict[str, type[LlamaForCausalLM]] = {
    "llama": LlamaForCausalLM,
    "mistral": MistralForCausalLM,
    "phi3": Phi3ForCausalLM,
    "qwen2": Qwen2ForCausalLM,
    "qwen3": Qwen3ForCausalLM,
}


def build_model(config, max_positions: int, tp: TensorParallel = SINGLE,
                residual_dtype: torch.dtype | None = None) -> LlamaForCausalLM:
    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_REGISTRY:
        raise NotImplementedError(f"model_type {model_type!r} is not supported by the hybrid engine "
                                  f"(supported: {sorted(MODEL_REGISTRY)}); use actor_rollout_ref.rollout.name=hf")
    return MODEL_REGISTRY[model_type](config, max_positions, tp, residual_dtype)


def load_weights(model: nn.Module, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
    """Copy HF-named tensors into the engine's (possibly fused) parameters; returns the names filled."""
    params = dict(model.named_parameters())
    mapping = getattr(model, "packed_modules_mapping", {})
    loaded: set[str] = set()
    with torch.no_grad():
        for name, tensor in named_tensors:
            if "rotary_emb." in name or (name == "lm_head.weight" and model.tie_word_embeddings):
                continue
            target, shard_id = name, None
            for hf_module, (engine_module, shard) in mapping.items():
                if f".{hf_module}." in name:
                    target, shard_id = name.replace(f".{hf_module}.", f".{engine_module}."), shard
                    break
            if target not in params:
                raise KeyError(f"weight {name!r} has no counterpart in the engine's {type(model).__name__}; "
                               "pass HF parameter names (model.layers.0.self_attn.q_proj.weight, ...)")
            param = params[target]
            getattr(param, "weight_loader", default_weight_loader)(param, tensor.detach(), shard_id)
            loaded.add(target)
    return loaded
