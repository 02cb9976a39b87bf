"""Phi-3 for the engine: Llama whose checkpoint already holds fused `qkv_proj` and `gate_up_proj`.

The fused HF tensors load whole (shard id None), so no q/k/v or gate/up name mapping applies.
Partial rotary (`partial_rotary_factor`) and `sliding_window` come from the config.
"""

from __future__ import annotations

from hybridrl.rollout.engine.models.llama import LlamaForCausalLM


class Phi3ForCausalLM(LlamaForCausalLM):
    packed_modules_mapping: dict[str, tuple[str, object]] = {}
