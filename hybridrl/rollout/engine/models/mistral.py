"""Mistral for the engine: Llama with a sliding attention window on every layer (`config.sliding_window`)."""

from __future__ import annotations

from hybridrl.rollout.engine.models.llama import LlamaForCausalLM


class MistralForCausalLM(LlamaForCausalLM):
    pass
