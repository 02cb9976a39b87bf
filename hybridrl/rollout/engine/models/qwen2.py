"""Qwen2 / Qwen2.5 for the engine: Llama with biased q/k/v projections (and per-layer sliding windows)."""

from __future__ import annotations

from hybridrl.rollout.engine.models.llama import LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    qkv_bias = True
