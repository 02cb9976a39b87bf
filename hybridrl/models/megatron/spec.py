"""The architecture of a dense GPT as both Megatron `args` and an HF config describe it.

`GptSpec` is the meeting point: Megatron args (or an HF config) -> spec -> HF config (or Megatron args).
Only what both sides can express is supported: RMSNorm, SwiGLU, RoPE (non-interleaved, full rotary), GQA,
optional QKV bias (Qwen2) or QK-norm (Qwen3), no other linear biases, no MoE.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
from transformers import AutoConfig, PretrainedConfig

from hybridrl.models.megatron.layout import MegatronCheckpointError

SUPPORTED_ARCHS = ("llama", "mistral", "qwen2", "qwen3")
_ARCH_HINT = ("supported: dense Llama-like GPTs (RMSNorm, SwiGLU, RoPE, GQA; optional QKV bias -> Qwen2, "
              "QK layernorm -> Qwen3)")
# Megatron-LM's `--use-rope-scaling` hard-codes Llama 3.1's scaling except for the factor.
_LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


@dataclass
class GptSpec:
    """Sizes and options of one dense GPT; `vocab_size` is the real (HF) vocabulary, before TP padding."""

    model_type: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    tie_embeddings: bool
    qkv_bias: bool = False
    qk_layernorm: bool = False
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling_factor: float | None = None  # Llama-3.1 style scaling when set
    max_position_embeddings: int = 4096


def _arg(args: argparse.Namespace, *names: str, default=None):
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            return value
    return default


def _position_embedding_type(args: argparse.Namespace) -> str:
    """Megatron-LM before mid-2023 had `--use-rotary-position-embeddings` instead of the type name."""
    if getattr(args, "position_embedding_type", None):
        return args.position_embedding_type
    return "rope" if getattr(args, "use_rotary_position_embeddings", False) else "learned_absolute"


def _reject_unsupported_args(args: argparse.Namespace) -> None:
    checks = [
        (_arg(args, "normalization", default="LayerNorm") == "RMSNorm", "normalization", "RMSNorm"),
        (bool(_arg(args, "swiglu", default=False)), "swiglu", "True"),
        (_position_embedding_type(args) == "rope", "position_embedding_type", "rope"),
        (not _arg(args, "num_experts", default=0), "num_experts", "None (dense MLP)"),
        (float(_arg(args, "rotary_percent", default=1.0)) == 1.0, "rotary_percent", "1.0"),
        (not _arg(args, "rotary_interleaved", default=False), "rotary_interleaved", "False"),
        (not _arg(args, "apply_layernorm_1p", default=False), "apply_layernorm_1p", "False"),
        (not _arg(args, "multi_latent_attention", default=False), "multi_latent_attention", "False"),
    ]
    for ok, name, supported in checks:
        if not ok:
            raise MegatronCheckpointError(f"checkpoint args have {name}={getattr(args, name, None)!r}; this "
                                          f"converter needs {name}={supported} ({_ARCH_HINT})")


def spec_from_args(args: argparse.Namespace, *, vocab_size: int, qkv_bias: bool, qk_layernorm: bool,
                   tie_embeddings: bool) -> GptSpec:
    """The spec described by Megatron `args`; the bias/norm/tying flags come from the weights present."""
    _reject_unsupported_args(args)
    heads = int(args.num_attention_heads)
    groups = int(_arg(args, "num_query_groups", default=heads)) if _arg(args, "group_query_attention") else heads
    model_type = "qwen3" if qk_layernorm else "qwen2" if qkv_bias else "llama"
    if model_type == "llama" and _arg(args, "hf_model_type") == "mistral":  # written by hf-to-megatron
        model_type = "mistral"
    return GptSpec(
        model_type=model_type, num_layers=int(args.num_layers), hidden_size=int(args.hidden_size),
        num_heads=heads, num_kv_heads=groups,
        head_dim=int(_arg(args, "kv_channels", default=args.hidden_size // heads)),
        ffn_hidden_size=int(_arg(args, "ffn_hidden_size", default=4 * args.hidden_size)),
        vocab_size=vocab_size, tie_embeddings=tie_embeddings, qkv_bias=qkv_bias, qk_layernorm=qk_layernorm,
        norm_eps=float(_arg(args, "norm_epsilon", "layernorm_epsilon", default=1e-5)),
        rope_theta=float(_arg(args, "rotary_base", default=10000)),
        rope_scaling_factor=(float(_arg(args, "rope_scaling_factor", default=8.0))
                             if _arg(args, "use_rope_scaling") else None),
        max_position_embeddings=int(_arg(args, "max_position_embeddings", "seq_length", default=4096)))


def _rope_of(config: PretrainedConfig) -> tuple[float, dict | None]:
    """(rope_theta, scaling dict or None) for transformers 4.x (rope_theta/rope_scaling) and 5.x (rope_parameters)."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    scaling = getattr(config, "rope_scaling", None) or params
    if scaling.get("rope_type", scaling.get("type", "default")) in ("default", None):
        return float(theta), None
    return float(theta), dict(scaling)


def _llama3_factor(config: PretrainedConfig, scaling: dict | None) -> float | None:
    if scaling is None:
        return None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "llama3" or any(float(scaling.get(k, -1)) != v for k, v in _LLAMA3_ROPE.items()):
        raise MegatronCheckpointError(f"{config.model_type} config has rope scaling {scaling}; Megatron "
                                      f"supports only Llama-3.1 scaling with {_LLAMA3_ROPE}")
    return float(scaling["factor"])


def spec_from_hf_config(config: PretrainedConfig) -> GptSpec:
    """The spec of an HF config of a supported architecture; unsupported options raise."""
    if config.model_type not in SUPPORTED_ARCHS:
        raise MegatronCheckpointError(f"HF config has model_type={config.model_type!r}; supported: "
                                      f"{', '.join(SUPPORTED_ARCHS)}")
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        raise MegatronCheckpointError(f"HF config has hidden_act={config.hidden_act!r}, mlp_bias="
                                      f"{getattr(config, 'mlp_bias', False)}; supported: silu without MLP bias")
    if getattr(config, "attention_bias", False) and config.model_type != "qwen2":
        raise MegatronCheckpointError(f"{config.model_type} config has attention_bias=True (bias on the output "
                                      "projection too); Megatron GPT supports a bias on QKV only (Qwen2)")
    heads = config.num_attention_heads
    theta, scaling = _rope_of(config)
    return GptSpec(
        model_type=config.model_type, num_layers=config.num_hidden_layers, hidden_size=config.hidden_size,
        num_heads=heads, num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        ffn_hidden_size=config.intermediate_size, vocab_size=config.vocab_size,
        tie_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        qkv_bias=config.model_type == "qwen2", qk_layernorm=config.model_type == "qwen3",
        norm_eps=float(config.rms_norm_eps), rope_theta=theta, rope_scaling_factor=_llama3_factor(config, scaling),
        max_position_embeddings=config.max_position_embeddings)


_SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_hidden_size",
                 "qkv_bias", "qk_layernorm", "tie_embeddings")


def check_same_shapes(from_args: GptSpec, from_hf: GptSpec, hf_config_path: str) -> None:
    """An explicit HF config must describe the checkpoint's shapes; say which field disagrees."""
    diffs = [f"{f}: checkpoint {getattr(from_args, f)} vs HF config {getattr(from_hf, f)}"
             for f in _SHAPE_FIELDS if getattr(from_args, f) != getattr(from_hf, f)]
    if diffs:
        raise MegatronCheckpointError(f"the HF config at {hf_config_path} does not match the Megatron "
                                      f"checkpoint: {'; '.join(diffs)}")


def hf_config_from_spec(spec: GptSpec, dtype: torch.dtype = torch.float32) -> PretrainedConfig:
    """An HF config (LlamaConfig / Qwen2Config / Qwen3Config ...) for `spec`."""
    kwargs = dict(vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
                  intermediate_size=spec.ffn_hidden_size, num_hidden_layers=spec.num_layers,
                  num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
                  head_dim=spec.head_dim, rms_norm_eps=spec.norm_eps, rope_theta=spec.rope_theta,
                  max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=spec.tie_embeddings,
                  hidden_act="silu", dtype=dtype)
    if spec.rope_scaling_factor is not None:
        kwargs["rope_scaling"] = {"rope_type": "llama3", "factor": spec.rope_scaling_factor, **_LLAMA3_ROPE}
    config = AutoConfig.for_model(spec.model_type, **kwargs)
    config.architectures = [type(config).__name__.replace("Config", "ForCausalLM")]
    return config


def padded_vocab_size(vocab_size: int, tp_size: int, divisible_by: int = 128) -> int:
    """Megatron's `_vocab_size_with_padding`: round up to a multiple of divisible_by * TP size."""
    multiple = divisible_by * tp_size
    return -(-vocab_size // multiple) * multiple


def args_from_spec(spec: GptSpec, *, tp_size: int, pp_size: int, padded_vocab: int, divisible_by: int,
                   transformer_impl: str, dtype: torch.dtype, iteration: int) -> argparse.Namespace:
    """Megatron-LM `args` describing `spec` (the subset `--use-checkpoint-args` and this loader read)."""
    return argparse.Namespace(
        num_layers=spec.num_layers, hidden_size=spec.hidden_size, ffn_hidden_size=spec.ffn_hidden_size,
        num_attention_heads=spec.num_heads, group_query_attention=spec.num_kv_heads != spec.num_heads,
        num_query_groups=spec.num_kv_heads, kv_channels=spec.head_dim, vocab_size=spec.vocab_size,
        padded_vocab_size=padded_vocab, make_vocab_size_divisible_by=divisible_by,
        max_position_embeddings=spec.max_position_embeddings, seq_length=spec.max_position_embeddings,
        swiglu=True, normalization="RMSNorm", norm_epsilon=spec.norm_eps, position_embedding_type="rope",
        rotary_base=int(spec.rope_theta) if float(spec.rope_theta).is_integer() else spec.rope_theta,
        rotary_percent=1.0, rotary_interleaved=False, use_rope_scaling=spec.rope_scaling_factor is not None,
        rope_scaling_factor=spec.rope_scaling_factor or 8.0,
        untie_embeddings_and_output_weights=not spec.tie_embeddings, add_qkv_bias=spec.qkv_bias,
        add_bias_linear=False, qk_layernorm=spec.qk_layernorm, tensor_model_parallel_size=tp_size,
        pipeline_model_parallel_size=pp_size, virtual_pipeline_model_parallel_size=None,
        transformer_impl=transformer_impl, params_dtype=dtype, bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16, iteration=iteration, consumed_train_samples=0, consumed_valid_samples=0,
        hf_model_type=spec.model_type)
