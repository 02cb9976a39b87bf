"""The engine's RoPE table (models/rope.py) against the HF model's rotary embedding: the cos/sin each side rotates
by must be the same values, so the rotated q and k (and the log-probs after them) can agree bit for bit."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

from hybridrl.models.rope import build_rotary

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
CONFIGS = {  # Qwen2.5's default RoPE, Llama 3.1's scaled one
    "qwen2": (Qwen2Config(hidden_size=896, num_attention_heads=14, rope_theta=1e6), Qwen2RotaryEmbedding),
    "llama3": (LlamaConfig(hidden_size=512, num_attention_heads=8, rope_scaling=LLAMA3_SCALING), LlamaRotaryEmbedding),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("model_type", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_engine_table_holds_the_hf_models_cos_and_sin(device, model_type, dtype):
    """HF builds its rotary embedding on the CPU (from_pretrained) and the trainer moves it to the device; the
    engine builds its table on the device. Every position's cos/sin, in the activations' dtype, must be equal."""
    config, hf_class = CONFIGS[model_type]
    head_dim = config.hidden_size // config.num_attention_heads
    hf_rope = hf_class(config).to(device)
    positions = torch.arange(16384, device=device)
    hf_cos, hf_sin = hf_rope(torch.empty(1, dtype=dtype, device=device), positions[None])
    with torch.device(device):
        engine = build_rotary(config, head_dim, 16384)
    for name, hf_values, table in (("cos", hf_cos[0], engine.cos), ("sin", hf_sin[0], engine.sin)):
        differ = (table[positions].to(dtype) != hf_values).float().mean().item()
        assert differ == 0, f"{name}: {differ:.4%} of the table's {dtype} values differ from HF's"
