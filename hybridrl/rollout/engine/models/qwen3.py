"""Qwen3 for the engine: Llama plus per-head RMSNorm on q and k (before RoPE); head_dim from the config."""

from __future__ import annotations

from hybridrl.rollout.engine.models.llama import LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    qk_norm = True
